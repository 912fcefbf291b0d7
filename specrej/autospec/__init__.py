"""Parallel sampling lab: exact parallel sampling by autospeculation (Anari et al., arXiv 2511.07869).

A reconstruction from the paper's abstract: targets with exact any-order conditional marginals
(``targets``), the token-level and block verification rules (``verify``), sequential and
autospeculative samplers counting oracle rounds and queries (``samplers``), goodness-of-fit checks
(``exactness``) and rounds-against-n curves (``scaling``). It shares nothing with the LLM engine.
"""
from .exactness import Fit, chi2_test, fit
from .samplers import LABELS, SAMPLERS, Samples, Step, sample, trace
from .scaling import Curve, curve, loglog_slope
from .targets import TARGETS, CurieWeiss, MixtureProduct, PottsChain, Target, exact_distribution, make_target

__all__ = ["TARGETS", "SAMPLERS", "LABELS", "Target", "MixtureProduct", "CurieWeiss", "PottsChain", "make_target",
           "exact_distribution", "sample", "trace", "Samples", "Step", "fit", "Fit", "chi2_test", "curve", "Curve",
           "loglog_slope"]

"""The benchmark: Speculative Rejection against Best-of-N, and the engine against the alternatives.

Run it as ``python -m specrej.bench [--quick]`` (``--help`` lists the options), or under
``accelerate launch`` / ``torchrun`` to shard the prompts across processes.

Efficiency (``efficiency``), the paper's comparison. Per prompt, one Best-of-N_max run and one
Speculative Rejection run per alpha at N = N_max, on the same engine, seed and memory budget.
Coupled randomness makes candidate i write the same text in every run, so:

- Best-of-k for every k <= N_max is candidates 0..k-1 of the one Best-of-N_max run: the whole
  Best-of-N curve costs one run. Best-of-k is charged the prompt's prefill, its candidates'
  generated tokens (2 x params FLOPs each), their share of the reward FLOPs, and the run's wall
  time in proportion to FLOPs (``efficiency.bok_compute``);
- the reference is Best-of-N_max: improvement score 100 x (1 + mean over prompts of
  (best_method - best_ref) / (max_ref - min_ref)); relative compute = the method's compute
  summed over prompts / the reference's, in FLOPs and in wall time;
- speed-up: the compute Best-of-N needs for the method's improvement score (log-interpolated on
  the Best-of-k curve) over the method's; a lower bound when the method beats the largest N;
- how often Speculative Rejection kept the Best-of-N winner, and the Spearman correlation of
  the partial reward at each decision with the same candidate's final reward (from the
  Best-of-N run), both by ``specrej.compare`` (the rule the CLI and the app use too).

Engine speed (``engine_speed``): tokens/s against ``transformers`` ``generate`` on the same model,
batch, length and sampling; a Speculative Rejection run against the same run done the reference
code's way (re-tokenise + re-prefill at every decision, ``reference``); peak memory of each; and
FLOP/s as a fraction of a large matmul's FLOP/s measured in the same run.

Outputs (``--out``, default ``bench_out/``): the tables on stdout, ``bench.json`` with every
number, ``bench.html`` (interactive Plotly) and ``bench.png`` (matplotlib) of improvement score
against relative compute.
"""
from .efficiency import aggregate, bok_compute, load_prompts, run_prompt
from .run import main

__all__ = ["aggregate", "bok_compute", "load_prompts", "run_prompt", "main"]

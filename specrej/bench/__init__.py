"""The benchmark: Speculative Rejection against Best-of-N by the paper's protocol, and the engine
against the alternatives.

Run it as ``python -m specrej.bench [--quick]`` (``--help`` lists the options), or under
``accelerate launch`` / ``torchrun`` to shard the prompts across processes.

The protocol (``protocol``), per prompt:

- the reference: one coupled Best-of-N_ref run (in one batch; its tokens do not depend on it);
- Best-of-k for every k <= N_ref by order statistics (``specrej.analysis.curve``): the expected best of k
  random candidates, and the expected compute of Best-of-k under the memory budget (passes of
  the rows that fit at full length) in tokens, FLOPs, decode steps, and wall time modelled from
  step times measured at the budgeted batch;
- Speculative Rejection with each rejection rule (``specrej.core.rules``) at each (alpha, first
  decision) with n='auto': it opens with the rows that fill the budget at the first decision, as
  the paper does; grid points replayed by the simulator from the coupled run (exact in fp32),
  the ``--live`` points run for real and checked against it.

Over prompts (``protocol.aggregate``): improvement score against Best-of-N_ref, raw and capped at
its best, with 90% bootstrap intervals; relative compute; the speed-up at equal improvement in
decode steps (against fixed passes, refilled slots, a paged KV cache reserving at admission, and Best-of-N
as vLLM v1 schedules it, ``analysis.paging``; each with a bootstrap interval over prompts and the plateau's
sensitivity, ``analysis.boot``), FLOPs and wall time (a lower bound when SR beats Best-of-N_ref), what became of Best-of-N's winner
(kept, pruned at decision d, never drawn), the oracle ceiling at each point, and the Spearman of
partial against final reward at each decision (``specrej.analysis.compare``). The simulator (``simulate``)
is the live method driving a replay of one coupled run (``backends.replay``); ``reward_study``
uses it to compare reward kinds.

Engine speed (``engine_speed``): tokens/s against ``transformers`` ``generate``; a Speculative
Rejection run against the reference code's re-prefill (``reference``); peak memory; FLOP/s.

Outputs (``--out``, default ``bench_out/``): the tables on stdout, ``bench.json`` with every
number (a top-level ``summary``, one row per method) and ``bench.png``, the paper's figure.
"""
from .prompts import load_prompts
from .protocol import aggregate, run_prompt, summary
from .run import main

__all__ = ["aggregate", "load_prompts", "run_prompt", "summary", "main"]

"""Ops a captured decoding step issues (issue 60, 4): every aten op of ``captured.Graphed.run`` counted under a
``TorchDispatchMode``, on a CPU, for a config's layer structure (its layers, heads, kv heads; widths shrunk, which
do not change the count), with CUDA's matmul attention. On a GPU each op is about one kernel launch, so this is the
step's launch count before any fusion (the profiler's count on the GPU is the check's to take).

    python scripts/step_ops.py                  # the 8B config and the 135M one, 8 rows
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


def _storages(x) -> set[int]:
    out = set()
    for t in torch.utils._pytree.tree_leaves(x):
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            out.add(t.untyped_storage().data_ptr())
    return out


class Count(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the ops that compute (a kernel on a GPU): an in-place op, or one whose output is new memory; a view, a
    reshape that views, a cast to the dtype a tensor already has are not counted (``views`` counts them)."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()
        self.views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket.__name__)
        if name.endswith("_") or not (_storages(out) <= _storages((args, kwargs))):
            self.ops[name] += 1
        else:
            self.views += 1
        return out


@torch.inference_mode()
def step_ops(name: str, rows: int = 8, attention: str = "matmul", dtype=torch.bfloat16) -> Count:
    """The ops of one ``Graphed.run`` at ``rows`` rows for config ``name``'s structure, narrow widths, in ``dtype``
    (bf16, as on the GPU: its casts are real)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from specrej.backends.hf import LM, Engine, Sampling, sample
    from specrej.engine import captured, shared_prefix

    spec = {k: v for k, v in json.loads((ROOT / f"assets/configs/{name}.json").read_text()).items()
            if not k.startswith("_")}
    heads, kvh = spec["num_attention_heads"], spec["num_key_value_heads"]
    spec.update(hidden_size=4 * heads, head_dim=8, intermediate_size=64, vocab_size=256, bos_token_id=None,
                eos_token_id=None)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**spec), dtype=dtype).eval()
    lm = LM(name, model, None, frozenset(), shares_prefix=shared_prefix.install(model))
    s = Sampling(0.8, 0.95, 50)
    eng = Engine(lm, list(range(3, 27)), sampling=s, seed=0, n_total=rows, max_new_tokens=8, stats=False)
    body = captured.Body(model, attention=attention)
    g = captured.Graphed(body, eng.prompt_cache, eng.prompt_logits, list(range(rows)), uniforms=eng.uniforms(),
                         sample=lambda logits, u: sample(logits, u, s), max_new_tokens=8, capture=False)
    g.step()   # a first step (lazy inits)
    with Count() as c:
        g.run(captured.bucket(g.n))
    assert kvh and heads
    return c


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="+", default=["llama-3-8b", "smollm2-135m"])
    p.add_argument("--rows", type=int, default=8)
    args = p.parse_args(argv)
    for name in args.configs:
        c = step_ops(name, args.rows)
        n, layers = sum(c.ops.values()), json.loads((ROOT / f"assets/configs/{name}.json").read_text())["num_hidden_layers"]
        top = ", ".join(f"{k} {v}" for k, v in c.ops.most_common(10))
        print(f"{name}: {n} computing ops a step ({n / layers:.1f} a layer; {c.views} views and no-op casts "
              f"besides); {top}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

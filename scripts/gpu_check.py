"""The GPU check's measurements, with the device's own torch and transformers (nothing installed or fetched).

    python scripts/gpu_check.py --out gpu_out/steps.json              # on the GPU machine
    python scripts/gpu_check.py --device cpu --tiny --out /tmp/s.json  # the CPU dry run (CI runs it)

Models are built from the configs in ``assets/configs/`` (SmolLM2-135M, Llama-3-8B) with random weights:
a step's time does not depend on the weights' values. ``--tiny`` shrinks each config to 2 layers and a
small width (same families, same code paths). Writes one JSON (written again after every measurement,
so a check cut short keeps what it measured):

- ``steps``: per config, per variant (``eager``: transformers' forward with the shared-prefix attention;
  ``compiled``: ``specrej.engine.compiled.Step`` under torch.compile; ``cudagraphs``: the same with
  ``mode="reduce-overhead"``, CUDA only), per row count: the median ms of a decoding step;
- ``race``: a coupled race of Best-of-N and Speculative Rejection on the random SmolLM2-sized model
  (the prune and keep paths on this device): every Speculative Rejection candidate's tokens against the
  same candidate's in Best-of-N (a prefix while it lived), counted.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

CONFIGS = {"smollm2-135m": ROOT / "assets/configs/smollm2-135m.json", "llama-3-8b": ROOT / "assets/configs/llama-3-8b.json"}
ROWS = (1, 8, 32, 128, 512, 1024)
PROMPT_TOKENS = 24


class IdText:
    """Text for a random-weight model's token ids (no tokenizer travels with a config): the ids themselves."""

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


def build(name: str, device: torch.device, dtype: torch.dtype, tiny: bool):
    """The config's model with random weights, as a ``specrej.backends.hf.LM`` (shared-prefix attention installed)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from specrej.engine import shared_prefix
    from specrej.backends.hf import LM

    spec = {k: v for k, v in json.loads(CONFIGS[name].read_text()).items() if not k.startswith("_")}
    if tiny:   # the same family at a size a CPU builds in a second
        spec.update(num_hidden_layers=2, hidden_size=16 * spec["num_attention_heads"], head_dim=16,
                    intermediate_size=256, vocab_size=512, bos_token_id=None, eos_token_id=None)
    config = AutoConfig.for_model(**spec)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    shares = shared_prefix.install(model)
    return LM(f"random:{name}{'-tiny' if tiny else ''}", model, IdText(), frozenset(), shares_prefix=shares)


def step_ms(lm, step, rows: int, steps: int) -> float:
    """Median ms of ``steps`` decoding steps at ``rows`` rows (``specrej.backends.steptime.time_steps``, after its warm-up
    step) with ``step`` (a ``compiled.Step``, or None for the eager forward)."""
    from specrej.engine import compiled
    from specrej.backends.steptime import time_steps

    compiled.use(lm.model, step)
    return 1000 * statistics.median(time_steps(lm, list(range(3, 3 + PROMPT_TOKENS)), rows, steps)[0])


@torch.inference_mode()
def coupled_race(lm, n: int, tokens: int) -> dict:
    """Best-of-N and Speculative Rejection on one engine; each SR candidate's tokens against BoN's."""
    from specrej import RunConfig, race_arms, to_dict
    from specrej.core.events import Finished
    from specrej.rewards import load_reward

    cfg = RunConfig(prompt="gpu check", n=n, alpha=0.5, max_new_tokens=tokens, budget=PROMPT_TOKENS + n * tokens // 2,
                    seed=0, progress_every=0)
    lm.render = lambda prompt: list(range(3, 3 + PROMPT_TOKENS))   # noqa: E731 (a random model has no template)
    t = time.perf_counter()
    fin = {e.arm: e for e in race_arms(lm, load_reward("self-certainty"), cfg) if isinstance(e, Finished)}
    wall = time.perf_counter() - t
    bon = {c.id: c.text.split() for c in fin["bon"].candidates}   # IdText: the token ids themselves
    compared = diverged = 0
    for c in fin["sr"].candidates:
        ids = c.text.split()
        if ids:
            compared += 1
            diverged += bon[c.id][:len(ids)] != ids
    sr = to_dict(fin["sr"])
    return {"n": n, "max_new_tokens": tokens, "wall_s": round(wall, 3), "rounds": fin["sr"].rounds,
            "pruned": sum(c["status"] == "pruned" for c in sr["candidates"]), "compared": compared,
            "diverged": diverged, "sr_steps": fin["sr"].ledger.steps, "bon_steps": fin["bon"].ledger.steps}


def main(argv=None) -> int:
    from specrej.engine import compiled

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default=None, help="default: bf16 on CUDA, fp32 on a CPU")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    p.add_argument("--steps", type=int, default=8, help="timed steps per variant and row count")
    p.add_argument("--tiny", action="store_true", help="2-layer, narrow versions of the configs (the CPU dry run)")
    p.add_argument("--deadline-s", type=float, default=420.0, help="stop measuring past this many seconds")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    start = time.perf_counter()
    device = torch.device(args.device)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype or ("bf16" if device.type == "cuda" else "fp32")]
    import transformers

    report = {"date": datetime.date.today().isoformat(), "device": device.type,
              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
              "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
              "dtype": str(dtype).replace("torch.", ""), "tiny": args.tiny, "steps": {}, "errors": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        args.out.write_text(json.dumps(report, indent=1))

    def left() -> float:
        return args.deadline_s - (time.perf_counter() - start)

    variants = ["eager", "compiled"] + (["cudagraphs"] if device.type == "cuda" else [])
    for name in args.configs:
        lm = build(name, device, dtype, args.tiny)
        entry = report["steps"][name] = {"params": lm.n_params, "layers": lm.model.config.num_hidden_layers,
                                         "variants": {}}
        for variant in variants:
            rows_ms = entry["variants"][variant] = []
            try:
                t = time.perf_counter()
                step = None if variant == "eager" else compiled.Step(
                    lm.model, compile_=True, mode="reduce-overhead" if variant == "cudagraphs" else None)
                if step is not None:
                    compiled.warm(step)
                entry.setdefault("compile_s", {})[variant] = round(time.perf_counter() - t, 2)
                for rows in args.rows:
                    if left() < 0:
                        report["errors"].append(f"{name} {variant}: deadline reached before {rows} rows")
                        break
                    ms = step_ms(lm, step, rows, args.steps)
                    rows_ms.append({"rows": rows, "step_ms": round(ms, 3)})
                    print(f"{name:>13} {variant:>10} {rows:>5} rows: {ms:9.2f} ms a step", flush=True)
                    save()
                if step is not None:
                    step.release()
            except Exception as e:   # one variant failing must not lose the others' figures
                report["errors"].append(f"{name} {variant}: {type(e).__name__}: {str(e)[:300]}")
                print(f"{name} {variant} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
            compiled.use(lm.model, None)
            save()
        if name == "smollm2-135m" and left() > 0:
            try:
                for kind in ("eager", "compiled"):
                    st = None
                    if kind == "compiled":
                        st = compiled.Step(lm.model, compile_=True)
                    compiled.use(lm.model, st)
                    report.setdefault("race", {})[kind] = race = coupled_race(lm, n=32 if not args.tiny else 8,
                                                                              tokens=48 if not args.tiny else 12)
                    print(f"coupled race ({kind}): {race}", flush=True)
                    save()
            except Exception as e:
                report["errors"].append(f"race: {type(e).__name__}: {str(e)[:300]}")
                print(f"race FAILED: {type(e).__name__}: {e}", flush=True)
            compiled.use(lm.model, None)
        del lm
        if device.type == "cuda":
            torch.cuda.empty_cache()
    report["wall_s"] = round(time.perf_counter() - start, 1)
    save()
    print(f"wrote {args.out} in {report['wall_s']} s; errors: {len(report['errors'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

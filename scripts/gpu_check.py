"""The GPU check's measurements, with the device's own torch and transformers (nothing installed or fetched).

    python scripts/gpu_check.py --out gpu_out/steps.json              # on the GPU machine
    python scripts/gpu_check.py --device cpu --tiny --out /tmp/s.json  # the CPU dry run (CI runs it)

Models are built from the configs in ``assets/configs/`` (SmolLM2-135M, Llama-3-8B) with random weights:
a step's time does not depend on the weights' values. ``--tiny`` shrinks each config to 2 layers and a
small width (same families, same code paths). Writes one JSON (written again after every measurement,
so a check cut short keeps what it measured):

- ``steps``: per config, per variant (``eager``: transformers' forward with the shared-prefix attention;
  ``compiled``: ``specrej.engine.compiled.Step`` under torch.compile; ``captured``: the whole step, sampling
  included, one CUDA graph per row bucket, ``specrej.engine.captured``; on a CPU its body uncaptured), per row
  count: the median ms of a decoding step (sampling included), with its ratio to the roofline;
- ``ceilings``: the device's copy bandwidth and large-matmul rate, measured here; each step's roofline is
  max(weight bytes / bandwidth, 2 x params x rows / matmul rate);
- ``anchors``: transformers' own fast path on the same model (``generate`` with ``cache_implementation="static"``,
  which compiles its forward; greedy, every token forced): ms a token at 1 and 64 rows, from two lengths' difference;
- ``race``: a coupled race of Best-of-N and Speculative Rejection on the random SmolLM2-sized model, per variant
  (the prune and keep paths on this device): every Speculative Rejection candidate's tokens against the same
  candidate's in Best-of-N (a prefix while it lived), counted;
- ``paper_race``: one race at the paper's scale on the 8B config (``--paper-n`` candidates, ``--paper-tokens`` each,
  the device's default memory budget: Best-of-N in several passes, Speculative Rejection opening with the batch
  that fills it), timed end to end: each arm's decode steps, passes, seconds, and the speed-up.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
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


VARIANTS = ("eager", "compiled", "captured")


def use_variant(lm, variant: str, step=None) -> None:
    """Engines of ``lm`` decode with ``variant`` from now on (``step``: the compiled one, for "compiled")."""
    from specrej.engine import captured, compiled

    os.environ[captured.GRAPH_ENV] = "1" if variant == "captured" else "0"
    captured._bodies.pop(lm.model, None)
    compiled.use(lm.model, step if variant == "compiled" else None)


def step_ms(lm, rows: int, steps: int) -> float:
    """Median ms of ``steps`` decoding steps at ``rows`` rows (``specrej.backends.steptime.time_steps``, after its warm-up
    step) with the variant in use (``use_variant``)."""
    from specrej.backends.steptime import time_steps

    return 1000 * statistics.median(time_steps(lm, list(range(3, 3 + PROMPT_TOKENS)), rows, steps)[0])


def failed(report: dict, label: str, e: BaseException) -> None:
    """A stage failed: its whole traceback into the report and the log (the root cause, not 300 characters)."""
    import traceback

    tb = "".join(traceback.format_exception(e))
    report["errors"].append(f"{label}: {type(e).__name__}: {e}")
    report.setdefault("tracebacks", {})[label] = tb
    print(f"{label} FAILED:\n{tb}", flush=True)


def _failure(lm) -> str | None:
    from specrej.engine import captured

    return captured.failure(lm.model)


def captured_or_raise(lm) -> None:
    """Where the captured variant fell back (``captured.failure``: the capture failed and the engine went on
    uncaptured), its figures are not the captured step's: raise, so none is recorded under its name."""
    why = _failure(lm)
    if why:
        raise RuntimeError(f"the capture failed, so the engine ran uncaptured: {why}")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ceilings(device: torch.device, dtype: torch.dtype, tiny: bool) -> dict:
    """The device's copy bandwidth (GB/s, read + write) and large-matmul rate (TFLOP/s in ``dtype``), measured."""
    n_bytes = (64 if tiny else 2048) * 2**20
    x = torch.empty(n_bytes // 4, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    _sync(device)
    t, reps = time.perf_counter(), 10
    for _ in range(reps):
        y.copy_(x)
    _sync(device)
    copy_gbps = 2 * reps * n_bytes / (time.perf_counter() - t) / 1e9
    del x, y
    n = 1024 if tiny else 8192
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    for _ in range(2):
        a @ b
    _sync(device)
    t, reps = time.perf_counter(), 3 if tiny else 20
    for _ in range(reps):
        a @ b
    _sync(device)
    tflops = 2 * n**3 * reps / (time.perf_counter() - t) / 1e12
    return {"copy_GBps": round(copy_gbps, 1), "matmul_TFLOPs": round(tflops, 2), "matmul_n": n,
            "copy_MiB": n_bytes // 2**20}


def roofline_ms(params: int, element_bytes: int, rows: int, ceil: dict) -> float:
    """max(the weights read once / the copy bandwidth, 2 x params x rows / the matmul rate), in ms."""
    return 1000 * max(params * element_bytes / (ceil["copy_GBps"] * 1e9 / 2),
                      2 * params * rows / (ceil["matmul_TFLOPs"] * 1e12))


@torch.inference_mode()
def hf_static_ms(lm, rows: int, lengths=(16, 48)) -> float:
    """transformers' ``generate`` with a static cache (its fast path, compiling the forward), greedy, every token
    forced: ms a token at ``rows`` rows, from the difference of two lengths (the prompt and set-up cancel)."""
    m = lm.model
    ids = torch.full((rows, PROMPT_TOKENS), 3, dtype=torch.long, device=lm.device)
    kw = dict(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, cache_implementation="static",
              pad_token_id=0, eos_token_id=None)
    m.generate(**kw, max_new_tokens=lengths[0], min_new_tokens=lengths[0])   # its compile and warm-up
    walls = []
    for n in lengths:
        _sync(lm.device)
        t = time.perf_counter()
        m.generate(**kw, max_new_tokens=n, min_new_tokens=n)
        _sync(lm.device)
        walls.append(time.perf_counter() - t)
    return 1000 * (walls[1] - walls[0]) / (lengths[1] - lengths[0])


@torch.inference_mode()
def paper_race(lm, n: int, tokens: int) -> dict:
    """Best-of-``n`` (in as many passes as the device's default memory budget needs) and Speculative Rejection
    (alpha 0.5, ``n=auto``: opening with the batch that fills that budget at its first decision) at ``tokens``
    tokens, each timed end to end (scoring included: self-certainty, read from the logits)."""
    from specrej import RunConfig, race_arms
    from specrej.core.events import Finished
    from specrej.rewards import load_reward

    cfg = RunConfig(prompt="gpu check", n=n, alpha=0.5, max_new_tokens=tokens, seed=0, progress_every=0)
    lm.render = lambda prompt: list(range(3, 3 + PROMPT_TOKENS))   # noqa: E731 (a random model has no template)
    fin = {e.arm: e for e in race_arms(lm, load_reward("self-certainty"), cfg, arms=("bon", "sr:n=auto"))
           if isinstance(e, Finished)}
    out = {"n": n, "max_new_tokens": tokens, "sr_n": len(fin["sr"].candidates)}   # n=auto: the batch that fills it
    for arm in ("bon", "sr"):
        led = fin[arm].ledger
        out[arm] = {"steps": led.steps, "wall_s": round(led.wall_s, 2), "reward_s": round(led.reward_s, 2),
                    "budget_slots": led.budget, "peak_kv_slots": led.peak_kv_slots,
                    **({"passes": -(-n * tokens // max(led.budget - PROMPT_TOKENS, 1))} if arm == "bon" else {})}
    out["speedup_wall"] = round(out["bon"]["wall_s"] / max(out["sr"]["wall_s"], 1e-9), 2)
    out["speedup_steps"] = round(out["bon"]["steps"] / max(out["sr"]["steps"], 1), 2)
    return out


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
    p.add_argument("--anchor-rows", type=int, nargs="*", default=[1, 64],
                   help="rows at which transformers' static-cache generate is timed (none: skip)")
    p.add_argument("--paper-n", type=int, default=2048, help="the paper-scale race's candidates on the 8B config (0: skip)")
    p.add_argument("--paper-tokens", type=int, default=256)
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

    element_bytes = torch.empty((), dtype=dtype).element_size()
    try:
        report["ceilings"] = ceil = ceilings(device, dtype, args.tiny)
        print(f"ceilings: {ceil}", flush=True)
    except Exception as e:
        ceil = None
        failed(report, "ceilings", e)
    save()
    for name in args.configs:
        lm = build(name, device, dtype, args.tiny)
        entry = report["steps"][name] = {"params": lm.n_params, "layers": lm.model.config.num_hidden_layers,
                                         "variants": {}}
        anchors = {}
        for rows in args.anchor_rows:   # transformers' own fast path first: a baseline for every ratio below
            if left() < 0:
                break
            try:
                use_variant(lm, "eager")
                anchors[rows] = ms = round(hf_static_ms(lm, rows), 3)
                report.setdefault("anchors", {}).setdefault(name, {})[str(rows)] = ms
                print(f"{name:>13} transformers static {rows:>5} rows: {ms:9.2f} ms a token", flush=True)
            except Exception as e:
                failed(report, f"{name} anchor {rows}", e)
            save()
        for variant in VARIANTS:
            rows_ms = entry["variants"][variant] = []
            try:
                t = time.perf_counter()
                step = compiled.Step(lm.model, compile_=True) if variant == "compiled" else None
                if step is not None:
                    compiled.warm(step)
                use_variant(lm, variant, step)
                entry.setdefault("compile_s", {})[variant] = round(time.perf_counter() - t, 2)
                for rows in args.rows:
                    if left() < 0:
                        report["errors"].append(f"{name} {variant}: deadline reached before {rows} rows")
                        break
                    ms = step_ms(lm, rows, args.steps)
                    if variant == "captured":
                        captured_or_raise(lm)
                    row = {"rows": rows, "step_ms": round(ms, 3)}
                    words = ""
                    if ceil:
                        row["x_roofline"] = round(ms / roofline_ms(lm.n_params, element_bytes, rows, ceil), 2)
                        words += f"  {row['x_roofline']:5.2f}x roofline"
                    if rows in anchors and anchors[rows] > 0:
                        row["x_transformers"] = round(ms / anchors[rows], 2)
                        words += f"  {row['x_transformers']:5.2f}x transformers' static path"
                    rows_ms.append(row)
                    print(f"{name:>13} {variant:>10} {rows:>5} rows: {ms:9.2f} ms a step{words}", flush=True)
                    save()
                if step is not None:
                    step.release()
            except Exception as e:   # one variant failing must not lose the others' figures
                failed(report, f"{name} {variant}", e)
            use_variant(lm, "eager")
            save()
        if name == "smollm2-135m" and left() > 0:
            for kind in VARIANTS:
                try:
                    step = compiled.Step(lm.model, compile_=True) if kind == "compiled" else None
                    use_variant(lm, kind, step)
                    report.setdefault("race", {})[kind] = race = coupled_race(lm, n=32 if not args.tiny else 8,
                                                                              tokens=48 if not args.tiny else 12)
                    if kind == "captured":
                        captured_or_raise(lm)
                    print(f"coupled race ({kind}): {race}", flush=True)
                except Exception as e:
                    failed(report, f"race {kind}", e)
                save()
            use_variant(lm, "eager")
        if name == "llama-3-8b" and args.paper_n and left() > 0:
            try:
                use_variant(lm, "captured" if device.type == "cuda" else "eager")
                report["paper_race"] = race = paper_race(lm, args.paper_n, args.paper_tokens)
                race["variant"] = ("captured" if device.type == "cuda" else "eager") + (
                    f" (capture failed, ran uncaptured: {why})" if (why := _failure(lm)) else "")
                print(f"paper-scale race: {race}", flush=True)
            except Exception as e:
                failed(report, "paper race", e)
            use_variant(lm, "eager")
            save()
        del lm
        if device.type == "cuda":
            torch.cuda.empty_cache()
    report["wall_s"] = round(time.perf_counter() - start, 1)
    save()
    print(f"wrote {args.out} in {report['wall_s']} s; errors: {len(report['errors'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

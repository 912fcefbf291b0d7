"""The GPU check's measurements, with the device's own torch and transformers (nothing installed or fetched), in stages.

    python scripts/gpu_check.py --stage smoke --out gpu_out/gpu_steps.json      # one stage (scripts/gpu_check.sh
    python scripts/gpu_check.py --stage all --device cpu --tiny --out /tmp/s.json  # runs each in its own process)

Models are built from the configs in ``assets/configs/`` (SmolLM2-135M, Llama-3-8B) with random weights:
a step's time does not depend on the weights' values. ``--tiny`` shrinks each config to 2 layers and a
small width (same families, same code paths). Every stage adds its part to one JSON (``--out``; read back first,
so the stages of one check, each its own process, fill one file) and writes it after every figure, so a stage
cut short keeps what it measured; a failure keeps its whole traceback (``errors``, ``tracebacks``). The stages,
in order of value:

- ``smoke``: the captured step of the 135M config at 1 and 8 rows, its replay against the same body run uncaptured
  over the same buffers, across a prune (the tokens must be equal), with each bucket's capture time;
- ``bisect`` (``--piece sampling|forward|step``; where the smoke failed, each in a process of its own, since a
  failed capture can leave a process unable to capture again): that piece of the step captured alone;
- ``ceilings``: the device's copy bandwidth and large-matmul rate; each step's roofline is
  max(weight bytes / bandwidth, 2 x params x rows / matmul rate);
- ``sweep``: per config (8B first), per variant (``eager``: transformers' forward with the shared-prefix attention;
  ``compiled``: ``specrej.engine.compiled.Step`` under torch.compile; ``captured``: the whole step, sampling
  included, one CUDA graph per row bucket, ``specrej.engine.captured``; on a CPU its body uncaptured), per row
  count: the median ms of a decoding step, with its ratio to the roofline and to transformers' path;
- ``races``: a coupled race of Best-of-N and Speculative Rejection on the random SmolLM2-sized model, per variant:
  every Speculative Rejection candidate's tokens against the same candidate's in Best-of-N, counted;
- ``anchors``: transformers' own fast path (``generate`` with ``cache_implementation="static"``, which compiles its
  forward; greedy, every token forced), warmed at every length it then times (a new length is a new static cache:
  a recompile, which must not land inside the timing): ms a token from two lengths' difference;
- ``paper``: one race at the paper's scale on the 8B config (``--paper-n`` candidates, ``--paper-tokens`` each, the
  device's default memory budget, ``memplan.arm_budget``: Best-of-N in passes, Speculative Rejection opening with
  the batch that fills it), timed end to end: each arm's decode steps, passes, seconds, buffers and the speed-up.
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
    """Engines of ``lm`` decode with ``variant`` from now on (``step``: the compiled one, for "compiled"; "fused":
    the captured step with its body fused by inductor, ``SPECREJ_FUSE=1``)."""
    from specrej.engine import captured, compiled

    os.environ[captured.GRAPH_ENV] = "1" if variant in ("captured", "fused") else "0"
    os.environ[captured.FUSE_ENV] = "1" if variant == "fused" else "0"
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
def hf_static_ms(lm, rows: int, lengths=(16, 48), repeats: int = 3) -> float:
    """transformers' ``generate`` with a static cache (its fast path, compiling the forward), greedy, every token
    forced: ms a token at ``rows`` rows, from the difference of two lengths (the prompt and set-up cancel), each
    length's fastest of ``repeats`` timings taken in turn (a machine's other work only adds time: one timing each,
    then the medians of three, each gave a negative difference on a loaded 2-core CI machine, 2026-12-07).

    Each length is generated once untimed first: the static cache is sized prompt + new tokens, so a new length is
    a new cache shape and a recompile (2026-12-04, H200: 104 s then 74 s on the 8B config), which must not be timed."""
    m = lm.model
    ids = torch.full((rows, PROMPT_TOKENS), 3, dtype=torch.long, device=lm.device)
    kw = dict(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, cache_implementation="static",
              pad_token_id=0, eos_token_id=None)
    for n in lengths:   # its compile and warm-up, at every length timed below
        m.generate(**kw, max_new_tokens=n, min_new_tokens=n)
    walls: dict[int, list[float]] = {n: [] for n in lengths}
    for _ in range(repeats):
        for n in lengths:
            _sync(lm.device)
            t = time.perf_counter()
            m.generate(**kw, max_new_tokens=n, min_new_tokens=n)
            _sync(lm.device)
            walls[n].append(time.perf_counter() - t)
    short, long = (min(walls[n]) for n in lengths)
    return 1000 * (long - short) / (lengths[1] - lengths[0])


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
                    "budget_slots": led.budget, "peak_kv_slots": led.peak_kv_slots, "step": led.step,
                    **({"passes": -(-n * tokens // max(led.budget - PROMPT_TOKENS, 1))} if arm == "bon" else {})}
    if lm.device.type == "cuda":
        out["peak_memory_GB"] = round(torch.cuda.max_memory_allocated(lm.device) / 1e9, 2)
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


# ---- (a) smoke: the captured step at 1 and 8 rows, its replay against the same body uncaptured, across a prune

SMOKE_PROMPT = list(range(3, 3 + PROMPT_TOKENS))


def _graphed(lm, rows: int, tokens: int, capture: bool, fuse: bool = False):
    """A pass of ``rows`` rows on the captured step's body, straight from ``captured.Graphed`` (``capture``: CUDA
    graphs, else the same body run uncaptured over the same buffers; ``fuse``: the body fused, warmed first)."""
    from specrej.backends.hf import Engine, Sampling, sample
    from specrej.engine import captured

    sampling = Sampling(0.9, 0.95, 40)
    eng = Engine(lm, SMOKE_PROMPT, sampling=sampling, seed=1, n_total=max(rows, 2), max_new_tokens=tokens, stats=False)
    body = captured.Body(lm.model, fuse=fuse)
    body.warm()
    g = captured.Graphed(body, eng.prompt_cache, eng.prompt_logits, list(range(rows)), uniforms=eng.uniforms(),
                         sample=lambda logits, u: sample(logits, u, sampling), max_new_tokens=tokens, capture=capture)
    return eng, body, g


@torch.inference_mode()
def smoke_pass(lm, rows: int, tokens: int, prune_at: int, capture: bool, fuse: bool = False) -> dict:
    """Each candidate's tokens through ``tokens`` steps, the rows pruned to every other one (reversed) after
    ``prune_at``; the capture's seconds per bucket and the median replayed step."""
    from specrej.engine import captured

    eng, body, g = _graphed(lm, rows, tokens, capture, fuse)
    alive, tokens_of, captures, steps = list(range(rows)), {c: [] for c in range(rows)}, {}, []
    for s in range(tokens):
        b = captured.bucket(g.n)
        key = (b, g.window())
        fresh = g.capture and key not in g.graphs   # this step captures its bucket and window first
        _sync(lm.device)
        t = time.perf_counter()
        out = g.step()
        _sync(lm.device)
        if fresh:
            captures[f"{b} rows x {key[1]} positions"] = round(time.perf_counter() - t, 3)
        else:
            steps.append(time.perf_counter() - t)
        for c, (tok, _, _) in zip(alive, out):
            tokens_of[c].append(int(tok))
        if s + 1 == prune_at and len(alive) > 1:
            keep = list(range(len(alive)))[::-2]
            g.select(keep)
            alive = [alive[i] for i in keep]
    body.release()
    eng.release()
    return {"tokens": tokens_of, "failed": g.failed, "capture_s": captures, "relayouts": g.relayouts,
            "step_ms": round(1000 * statistics.median(steps), 3) if steps else None}


@torch.inference_mode()
def kernels_per_step(lm, rows: int = 8, fuse: bool = False) -> dict:
    """One uncaptured step of the captured body under the profiler: kernels launched on the GPU (on a CPU, the
    operators run), the figure fusion has to bring down (issue 60, 4: ~2,000 on the 8B config, target <= 450)."""
    from torch.profiler import ProfilerActivity, profile

    from specrej.engine import captured

    eng, body, g = _graphed(lm, rows, 8, capture=False, fuse=fuse)
    b = captured.bucket(g.n)
    g.step()   # lazy inits
    cuda = lm.device.type == "cuda"
    with profile(activities=[ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]) as prof:
        g.run(b)
        _sync(lm.device)
    events = prof.events()
    if cuda:
        n = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
        n = n or sum(len(getattr(e, "kernels", ()) or ()) for e in events)   # (a profiler that hangs them on the ops)
    else:
        n = sum(1 for e in events if e.name.startswith("aten::") and e.cpu_parent is None)
    body.release()
    eng.release()
    return {"rows": b, "kernels" if cuda else "cpu_ops": n}


def smoke(lm, rows_list=(1, 8), tokens: int = 24, prune_at: int = 10, capture: bool = True, fuse: bool = False) -> dict:
    """The captured step at each row count against the same body uncaptured: equal tokens, or what differed."""
    out = {}
    for rows in rows_list:
        got = smoke_pass(lm, rows, tokens, prune_at, capture, fuse)
        want = smoke_pass(lm, rows, tokens, prune_at, False, fuse)
        differ = [c for c in got["tokens"] if got["tokens"][c] != want["tokens"][c]]
        out[str(rows)] = {"captured": capture and got["failed"] is None, "capture_failed": got["failed"],
                          "equal": not differ, "differ": differ[:8], "capture_s": got["capture_s"],
                          "replay_ms": got["step_ms"], "uncaptured_ms": want["step_ms"]}
        print(f"smoke {rows} rows: {out[str(rows)]}", flush=True)
    return out


# ---- bisect: one piece of the step captured alone (its own process: a failed capture can poison the next)

@torch.inference_mode()
def bisect(lm, piece: str, rows: int = 8, capture: bool = True) -> dict:
    """Capture ``piece`` of the step alone (``sampling``: the coupled sampling of the logits; ``forward``: every
    layer and the head; ``step``: ``Graphed.run``, both and the statistics) and replay it once; on a CPU (no
    capture) the piece runs uncaptured. Raises with the capture's own error where it fails."""
    from specrej.engine import captured, compiled

    # the engine here only holds the prompt's cache and the uniforms: its own compiled step, never run, is not
    # built (its compile was 10 of a bisect process's 13 s on a CPU)
    compiled.use(lm.model, None)
    eng, body, g = _graphed(lm, rows, 8, capture=False)
    b = captured.bucket(g.n)
    tok = g.ids[:b].clone() % 7 + 3
    pieces = {"sampling": lambda: g.sample(g.logits[:b], g.uniforms[g.g.view(1), g.ids[:b]]),
              "forward": lambda: g.net.forward(tok, g.g + g.prefix_len, g.g, [o[:, :b] for o in g.own], g.pre),
              "step": lambda: g.run(b)}
    fn = pieces[piece]
    t = time.perf_counter()
    if capture and lm.device.type == "cuda":
        side = torch.cuda.Stream(lm.device)
        side.wait_stream(torch.cuda.current_stream(lm.device))
        with torch.cuda.stream(side):
            fn()   # the warm-up
        torch.cuda.current_stream(lm.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        graph.replay()
        torch.cuda.synchronize(lm.device)
        how = "captured and replayed"
    else:
        fn()
        how = "ran uncaptured (no CUDA)"
    body.release()
    eng.release()
    return {"piece": piece, "rows": b, "how": how, "s": round(time.perf_counter() - t, 3)}


# ---- the stages

STAGES = ("smoke", "bisect", "ceilings", "sweep", "races", "anchors", "paper", "fused")


class Check:
    """One stage's run: the report it adds to (read back from ``out``), saved after every figure."""

    def __init__(self, args):
        self.args = args
        self.start = time.perf_counter()
        self.device = torch.device(args.device)
        self.dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[
            args.dtype or ("bf16" if self.device.type == "cuda" else "fp32")]
        self.element_bytes = torch.empty((), dtype=self.dtype).element_size()
        import transformers

        prior = {}
        if args.out.exists():
            try:
                prior = json.loads(args.out.read_text())
            except ValueError:   # a stage killed mid-write: start a fresh report, the stage logs keep the rest
                prior = {}
        self.report = prior or {}
        self.report.update({
            "date": datetime.date.today().isoformat(), "device": self.device.type,
            "device_name": torch.cuda.get_device_name(self.device) if self.device.type == "cuda"
            else platform.processor() or "cpu",
            "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
            "dtype": str(self.dtype).replace("torch.", ""), "tiny": args.tiny})
        self.report.setdefault("steps", {})
        self.report.setdefault("errors", [])
        self.report.setdefault("stages", {})
        args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(self) -> None:
        tmp = self.args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.report, indent=1))
        tmp.replace(self.args.out)   # whole or not at all: a stage killed mid-write leaves the last good file

    def left(self) -> float:
        return self.args.deadline_s - (time.perf_counter() - self.start)

    def lm(self, name: str):
        return build(name, self.device, self.dtype, self.args.tiny)

    def stage(self, name: str, fn) -> bool:
        """Run one stage: its status (ok, failed, its seconds) in ``stages``, a failure's traceback kept."""
        t = time.perf_counter()
        self.report["stages"][name] = {"status": "running"}
        self.save()
        try:
            fn()
            status = "ok"
        except Exception as e:
            failed(self.report, f"stage {name}", e)
            status = "failed"
        self.report["stages"][name] = {"status": status, "s": round(time.perf_counter() - t, 1)}
        self.save()
        return status == "ok"

    # (a)
    def smoke(self) -> None:
        lm = self.lm("smollm2-135m")
        capture = self.device.type == "cuda"
        self.report["smoke"] = res = {"captured": capture, "rows": {}}
        for rows in (1, 8):
            try:
                res["rows"][str(rows)] = smoke(lm, (rows,), tokens=24 if not self.args.tiny else 12,
                                               prune_at=10 if not self.args.tiny else 5, capture=capture)[str(rows)]
            except Exception as e:
                failed(self.report, f"smoke {rows} rows", e)
                res["rows"][str(rows)] = {"error": f"{type(e).__name__}: {e}"}
            self.save()
        res["ok"] = all(r.get("equal") and (r.get("captured") or not capture) for r in res["rows"].values())
        try:
            res["per_step"] = kernels_per_step(lm)
            print(f"smoke: one step's launches {res['per_step']}", flush=True)
        except Exception as e:
            failed(self.report, "smoke kernels per step", e)
        self.save()
        if not res["ok"]:
            raise RuntimeError(f"smoke failed: {res['rows']}")

    def bisect(self) -> None:
        lm = self.lm("smollm2-135m")
        piece = self.args.piece
        res = self.report.setdefault("bisect", {})
        try:
            res[piece] = bisect(lm, piece)
        except Exception as e:
            res[piece] = {"piece": piece, "error": f"{type(e).__name__}: {e}"}
            self.save()
            raise
        print(f"bisect {piece}: {res[piece]}", flush=True)
        self.save()

    # (b)
    def ceilings(self) -> None:
        self.report["ceilings"] = ceil = ceilings(self.device, self.dtype, self.args.tiny)
        print(f"ceilings: {ceil}", flush=True)
        self.save()

    # (c)
    def sweep(self) -> None:
        from specrej.engine import compiled

        ceil = self.report.get("ceilings")
        names = [n for n in ("llama-3-8b", "smollm2-135m") if n in self.args.configs]
        for name in names:
            if self.left() < 0:
                self.report["errors"].append(f"sweep: deadline reached before {name}")
                break
            lm = self.lm(name)
            entry = self.report["steps"][name] = {"params": lm.n_params, "layers": lm.model.config.num_hidden_layers,
                                                  "variants": {}}
            anchors = {int(k): v for k, v in self.report.get("anchors", {}).get(name, {}).items()}
            for variant in VARIANTS:
                rows_ms = entry["variants"][variant] = []
                try:
                    t = time.perf_counter()
                    step = compiled.Step(lm.model, compile_=True) if variant == "compiled" else None
                    if step is not None:
                        compiled.warm(step)
                    use_variant(lm, variant, step)
                    entry.setdefault("compile_s", {})[variant] = round(time.perf_counter() - t, 2)
                    for rows in self.args.rows:
                        if self.left() < 0:
                            self.report["errors"].append(f"{name} {variant}: deadline reached before {rows} rows")
                            break
                        ms = step_ms(lm, rows, self.args.steps)
                        if variant == "captured":
                            captured_or_raise(lm)
                        row = {"rows": rows, "step_ms": round(ms, 3)}
                        words = ""
                        if ceil:
                            row["x_roofline"] = round(ms / roofline_ms(lm.n_params, self.element_bytes, rows, ceil), 2)
                            words += f"  {row['x_roofline']:5.2f}x roofline"
                        if rows in anchors and anchors[rows] > 0:
                            row["x_transformers"] = round(ms / anchors[rows], 2)
                            words += f"  {row['x_transformers']:5.2f}x transformers' static path"
                        rows_ms.append(row)
                        print(f"{name:>13} {variant:>10} {rows:>5} rows: {ms:9.2f} ms a step{words}", flush=True)
                        self.save()
                    if step is not None:
                        step.release()
                except Exception as e:   # one variant failing must not lose the others' figures
                    failed(self.report, f"{name} {variant}", e)
                use_variant(lm, "eager")
                self.save()
            del lm
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    # (d)
    def races(self) -> None:
        from specrej.engine import compiled

        lm = self.lm("smollm2-135m")
        for kind in VARIANTS:
            if self.left() < 0:
                self.report["errors"].append(f"races: deadline reached before {kind}")
                break
            try:
                step = compiled.Step(lm.model, compile_=True) if kind == "compiled" else None
                use_variant(lm, kind, step)
                self.report.setdefault("race", {})[kind] = race = coupled_race(
                    lm, n=32 if not self.args.tiny else 8, tokens=48 if not self.args.tiny else 12)
                if kind == "captured":
                    captured_or_raise(lm)
                print(f"coupled race ({kind}): {race}", flush=True)
            except Exception as e:
                failed(self.report, f"race {kind}", e)
            use_variant(lm, "eager")
            self.save()

    # (e)
    def anchors(self) -> None:
        order = [(n, r) for r in self.args.anchor_rows for n in ("llama-3-8b", "smollm2-135m") if n in self.args.configs]
        built = {}
        for name, rows in order:   # the 8B at one row first: the target's denominator
            if self.left() < 0:
                self.report["errors"].append(f"anchors: deadline reached before {name} at {rows} rows")
                break
            try:
                if name not in built:
                    built.clear()
                    if self.device.type == "cuda":
                        torch.cuda.empty_cache()
                    built[name] = self.lm(name)
                lm = built[name]
                use_variant(lm, "eager")
                ms = round(hf_static_ms(lm, rows), 3)
                self.report.setdefault("anchors", {}).setdefault(name, {})[str(rows)] = ms
                print(f"{name:>13} transformers static {rows:>5} rows: {ms:9.2f} ms a token", flush=True)
                for row in self.report["steps"].get(name, {}).get("variants", {}).values():   # the sweep's ratios
                    for r in row:
                        if r["rows"] == rows and ms > 0:
                            r["x_transformers"] = round(r["step_ms"] / ms, 2)
            except Exception as e:
                failed(self.report, f"{name} anchor {rows}", e)
            self.save()

    # (f)
    def paper(self) -> None:
        if not self.args.paper_n:
            return
        lm = self.lm("llama-3-8b")
        variant = "captured" if self.device.type == "cuda" else "eager"
        use_variant(lm, variant)
        self.report["paper_race"] = race = paper_race(lm, self.args.paper_n, self.args.paper_tokens)
        race["variant"] = variant + (f" (capture failed, ran uncaptured: {why})" if (why := _failure(lm)) else "")
        print(f"paper-scale race: {race}", flush=True)
        use_variant(lm, "eager")
        self.save()

    # (g) an experiment: the body fused by inductor, then captured (SPECREJ_FUSE=1)
    def fused(self) -> None:
        from specrej.engine import captured

        res = self.report["fused"] = {}
        lm = self.lm("smollm2-135m")
        t = time.perf_counter()
        body = captured.Body(lm.model, fuse=True)
        body.warm()
        res["warm_s"], res["fused"] = round(time.perf_counter() - t, 2), body.fuse   # False: the compiler failed
        body.release()
        self.save()
        capture = self.device.type == "cuda"
        res["smoke"] = smoke(lm, (8,), tokens=24 if not self.args.tiny else 12,
                             prune_at=10 if not self.args.tiny else 5, capture=capture, fuse=True)["8"]
        self.save()
        res["per_step"] = kernels_per_step(lm, fuse=True)
        print(f"fused: {res}", flush=True)
        self.save()
        if self.args.tiny:   # the dry run checks the path; its timings would say nothing
            return
        ceil = self.report.get("ceilings")
        for name in ("smollm2-135m", "llama-3-8b"):
            lm = lm if name == "smollm2-135m" else self.lm(name)
            use_variant(lm, "fused")
            entry = self.report["steps"].setdefault(name, {"params": lm.n_params, "variants": {}})
            rows_ms = entry["variants"]["fused"] = []
            for rows in self.args.rows:
                if self.left() < 0:
                    self.report["errors"].append(f"fused {name}: deadline reached before {rows} rows")
                    break
                ms = step_ms(lm, rows, self.args.steps)
                captured_or_raise(lm)
                row = {"rows": rows, "step_ms": round(ms, 3)}
                if ceil:
                    row["x_roofline"] = round(ms / roofline_ms(lm.n_params, self.element_bytes, rows, ceil), 2)
                rows_ms.append(row)
                print(f"{name:>13} {'fused':>10} {rows:>5} rows: {ms:9.2f} ms a step", flush=True)
                self.save()
            use_variant(lm, "eager")


def main(argv=None) -> int:
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stage", default="all", choices=("all",) + STAGES,
                   help="one stage (scripts/gpu_check.sh runs each in its own process), or all but bisect in order")
    p.add_argument("--piece", default="step", choices=("sampling", "forward", "step"), help="the bisect's piece")
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
    check = Check(args)
    stages = [s for s in STAGES if s != "bisect"] if args.stage == "all" else [args.stage]
    ok = True
    for name in stages:
        ok &= check.stage(name if name != "bisect" else f"bisect {args.piece}", getattr(check, name))
    check.report["wall_s"] = round(check.report.get("wall_s", 0) + time.perf_counter() - check.start, 1)
    check.save()
    print(f"wrote {args.out} ({', '.join(stages)}) in {round(time.perf_counter() - check.start, 1)} s; "
          f"errors so far: {len(check.report['errors'])}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""How fast the engine is: against ``transformers`` ``generate``, against the reference code's
re-prefill, and against this machine's roofline. All ratios come from one run.

- ``MatmulLimit``: FLOP/s of a large matmul in the generator's dtype, the practical compute limit;
  ``ReadBandwidth``: bytes/s a matrix-vector product streams, the practical memory limit. Both are
  sampled between the runs and reported as medians with their spread (the machine may be shared).
- ``roofline_s``: a decoding step of R rows can take no less than the larger of (weights + KV
  cache read) / bandwidth and 2 x params x R / matmul FLOP/s.
- ``engine_vs_generate``: the same model, batch, length and sampling settings, KV cache on;
  tokens per second count the tokens each row generated up to and including its EOS (rows
  that ``generate`` keeps padding after their EOS are not counted as output). Peak KV-cache
  bytes are measured on the cache objects at every step (``max_memory_allocated`` on CUDA).
- ``decode_sweep``: one decoding step at several batch sizes against its roofline: FLOP/s rises
  with rows while the step streams every weight once, which holds a small batch below the limit.
- ``coupling_check``: whether a candidate writes the same tokens in batches of other sizes and
  compositions, in the dtype in use (kernels may round differently for different row counts).
- ``sr_vs_reference``: one Speculative Rejection run on the engine against the same run with
  the reference code's re-tokenise + re-prefill at every decision (``reference``), which also
  keeps a copy of the prompt per row. Decisions come every ``max_new_tokens // 3`` tokens in both,
  under a budget that fits every row, so both prune at the same points (with the prompt shared,
  the engine's budget alone may never force a decision).
"""
from __future__ import annotations

import time
from dataclasses import replace

import torch

from ..core.config import RunConfig
from ..backends.hf import Engine, Sampling
from ..core.budget import KVBudget
from ..core.cost import flops
from ..core.events import Finished
from ..engine.kvcache import with_cache
from ..methods import speculative_rejection
from ..backends.steptime import _sync, time_steps
from .reference import speculative_rejection_reference_style


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def cache_bytes(cache) -> int:
    """Bytes the KV cache holds now (buffers with their spare room, not just the used part)."""
    if cache is None:
        return 0
    total = 0
    for layer in cache.layers:
        names = ("_k", "_v", "prefix_keys", "prefix_values") if hasattr(layer, "_k") else ("keys", "values")
        for name in names:
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def _spread(samples: list[float]) -> dict:
    s = sorted(samples)
    return {"median": s[len(s) // 2], "min": s[0], "max": s[-1], "samples": len(s)}


class _Probe:
    """A timed operation sampled between the engine's runs: ``work`` units (FLOPs, bytes) per call
    of ``_op``; on a shared machine the median of samples taken around the runs is the fair yardstick."""

    work: float

    def _start(self) -> None:
        self.samples: list[float] = []
        self.measure(1)   # warm-up, not kept
        self.samples.clear()

    def _op(self) -> None:
        raise NotImplementedError

    @torch.inference_mode()
    def measure(self, reps: int = 1) -> None:
        for _ in range(reps):
            _sync(self.device)
            t = time.perf_counter()
            self._op()
            _sync(self.device)
            self.samples.append(self.work / (time.perf_counter() - t))


class MatmulLimit(_Probe):
    """FLOP/s of a large matmul in ``dtype`` (the generator's): the practical compute limit."""

    def __init__(self, device: torch.device, dtype: torch.dtype = torch.float32, size: int = 2048):
        self.device, self.dtype = device, dtype
        self.size = max(size, 8192) if device.type == "cuda" else size
        self.a = torch.randn(self.size, self.size, device=device, dtype=self.dtype)
        self.b = torch.randn(self.size, self.size, device=device, dtype=self.dtype)
        self.work = 2 * self.size ** 3
        self._start()

    def _op(self) -> None:
        self.a @ self.b

    def summary(self) -> dict:
        sp = _spread(self.samples)
        return {"size": self.size, "dtype": str(self.dtype).replace("torch.", ""), "flops_per_s": sp["median"],
                "best_flops_per_s": sp["max"], "min_flops_per_s": sp["min"], "samples": sp["samples"]}


class ReadBandwidth(_Probe):
    """Bytes/s that a matrix-vector product streams from memory (``W @ x``, W far larger than the
    caches): what a decoding step does with every weight. Sampled like ``MatmulLimit``."""

    def __init__(self, device: torch.device, dtype: torch.dtype = torch.float32, mbytes: int = 256):
        self.device, self.dtype = device, dtype
        mbytes = max(mbytes, 2048) if device.type == "cuda" else mbytes
        cols = 4096
        rows = mbytes * 2 ** 20 // (cols * torch.finfo(dtype).bits // 8)
        self.w = torch.randn(rows, cols, device=device, dtype=dtype)
        self.x = torch.randn(cols, 1, device=device, dtype=dtype)
        self.bytes = self.work = self.w.numel() * self.w.element_size()
        self._start()

    def _op(self) -> None:
        self.w @ self.x

    def summary(self) -> dict:
        sp = _spread(self.samples)
        return {"mbytes": self.bytes / 2 ** 20, "dtype": str(self.dtype).replace("torch.", ""),
                "bytes_per_s": sp["median"], "best_bytes_per_s": sp["max"], "min_bytes_per_s": sp["min"],
                "samples": sp["samples"]}


def weight_bytes(lm) -> int:
    """The generator's weights in bytes (a vLLM LM holds no torch module here: its parameters x their width)."""
    model = getattr(lm, "model", None)
    if model is None:
        return lm.n_params * lm.dtype.itemsize
    return sum(p.numel() * p.element_size() for p in model.parameters())


def roofline_s(lm, rows: int, kv_bytes: int, flops_per_s: float, bytes_per_s: float) -> dict:
    """The least time a decoding step of ``rows`` rows can take: memory- or compute-bound."""
    memory = (weight_bytes(lm) + kv_bytes) / bytes_per_s
    compute = flops(lm.n_params, rows) / flops_per_s
    return {"roofline_s": max(memory, compute), "memory_s": memory, "compute_s": compute,
            "bound": "memory" if memory >= compute else "compute"}


@torch.inference_mode()
def run_engine(lm, prompt_ids: list[int], rows: int, length: int, sampling: Sampling, seed: int) -> dict:
    device = lm.device
    _reset_peak(device)
    _sync(device)
    t = time.perf_counter()
    eng = Engine(lm, prompt_ids, sampling=sampling, seed=seed, n_total=rows, max_new_tokens=length, stats=False)
    r = eng.start(list(range(rows)))
    tokens, peak = 0, cache_bytes(r.cache)
    while len(r):
        tokens += len(r)
        r.step()
        peak = max(peak, cache_bytes(r.cache))
    _sync(device)
    wall = time.perf_counter() - t
    eng.release()
    return {"wall_s": wall, "tokens": tokens, "prompt_tokens": len(prompt_ids), "peak_kv_bytes": peak,
            "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else peak}


@torch.inference_mode()
def run_generate(lm, prompt_ids: list[int], rows: int, length: int, sampling: Sampling, seed: int) -> dict:
    from transformers import DynamicCache, StoppingCriteria, StoppingCriteriaList

    device = lm.device
    cache = DynamicCache(config=lm.model.config)
    peak = [0]

    class Watch(StoppingCriteria):   # called once per step: measure the cache, never stop
        def __call__(self, input_ids, scores, **kwargs):
            peak[0] = max(peak[0], cache_bytes(cache))
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    eos = sorted(lm.eos_ids)
    torch.manual_seed(seed)
    _reset_peak(device)
    _sync(device)
    t = time.perf_counter()
    out = lm.model.generate(
        input_ids=torch.tensor([prompt_ids], device=device), attention_mask=torch.ones(1, len(prompt_ids),
                                                                                      dtype=torch.long, device=device),
        do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
        max_new_tokens=length, num_return_sequences=rows, **with_cache(lm.model, cache), use_cache=True,
        eos_token_id=eos, pad_token_id=eos[0], stopping_criteria=StoppingCriteriaList([Watch()]))
    _sync(device)
    wall = time.perf_counter() - t
    new = out[:, len(prompt_ids):].tolist()
    tokens = sum(next((i + 1 for i, x in enumerate(row) if x in lm.eos_ids), len(row)) for row in new)
    return {"wall_s": wall, "tokens": tokens, "prompt_tokens": rows * len(prompt_ids), "steps": len(new[0]),
            "peak_kv_bytes": peak[0],
            "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else peak[0]}


def engine_vs_generate(lm, prompt: str, rows: int, length: int, sampling: Sampling, seed: int,
                       repeats: int = 2, limit: MatmulLimit | None = None) -> dict:
    """Best of ``repeats`` alternating runs of each (the machine may be shared)."""
    ids = lm.render(prompt)
    eng = gen = None
    tick = limit.measure if limit is not None else (lambda reps=1: None)
    for _ in range(repeats):
        tick()
        e = run_engine(lm, ids, rows, length, sampling, seed)
        tick()
        g = run_generate(lm, ids, rows, length, sampling, seed)
        tick()
        eng = e if eng is None or e["wall_s"] < eng["wall_s"] else eng
        gen = g if gen is None or g["wall_s"] < gen["wall_s"] else gen
    for r in (eng, gen):
        r["tokens_per_s"] = r["tokens"] / r["wall_s"]
        r["flops"] = flops(lm.n_params, r["prompt_tokens"] + r["tokens"])
        r["flops_per_s"] = r["flops"] / r["wall_s"]
    return {"rows": rows, "length": length, "prompt_tokens": len(ids), "engine": eng, "generate": gen,
            "speedup": eng["tokens_per_s"] / gen["tokens_per_s"],
            "memory_ratio": gen["peak_memory_bytes"] / max(eng["peak_memory_bytes"], 1)}


@torch.inference_mode()
def decode_sweep(lm, prompt: str, rows_list: list[int], steps: int = 5, sampling: Sampling = Sampling(),
                 ticks=()) -> list[dict]:
    """Seconds per decoding step (median of ``steps`` after one warm-up) at each batch size, with the
    KV-cache bytes the step reads, on the LM's own backend. ``ticks``: limits to sample after each batch size."""
    ids, out = lm.render(prompt), []
    wb = weight_bytes(lm)
    for rows in rows_list:
        times, held = time_steps(lm, ids, rows, steps, sampling)
        kv = held * lm.kv_bytes_per_slot
        sp = _spread(times)
        dt = sp["median"]
        out.append({"rows": rows, "step_s": dt, "step_min_s": sp["min"], "step_max_s": sp["max"],
                    "flops_per_s": flops(lm.n_params, rows) / dt, "weight_bytes_per_s": wb / dt, "kv_bytes": kv})
        for tick in ticks:
            tick()
    return out


@torch.inference_mode()
def _decode(lm, ids: list[int], cands: list[int], sampling: Sampling, seed: int, n_total: int, length: int) -> dict:
    eng = Engine(lm, ids, sampling=sampling, seed=seed, n_total=n_total, max_new_tokens=length, stats=False)
    rows, out = eng.start(cands), {}
    while len(rows):
        out.update({d.cand: d.tokens for d in rows.step()})
    eng.release()
    return out


def coupling_check(lm, prompt: str, sampling: Sampling, seed: int, n: int = 32, length: int = 48) -> dict:
    """Does candidate c write the same tokens whatever batch it is in? All n candidates decode together,
    then again in batches of other sizes and compositions; count the candidates whose tokens differ
    (the kernels may round differently for different row counts: see docs/library.md, coupled randomness)."""
    ids = lm.render(prompt)
    everyone = _decode(lm, ids, list(range(n)), sampling, seed, n, length)
    half = n // 2
    batches = [list(range(half)), list(range(half, n)), list(range(1, n, 2)), [n // 3],
               sorted({3 % n, n - 2, n // 2})]
    compared, diverged = 0, []
    for batch in batches:
        part = _decode(lm, ids, batch, sampling, seed, n, length)
        for c in batch:
            compared += 1
            a, b = everyone[c], part[c]
            if a != b:
                diverged.append(next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))))
    return {"n": n, "length": length, "batches": [len(b) for b in batches], "compared": compared,
            "diverged": len(diverged), "diverged_at_tokens": sorted(diverged)}


def _finished(events) -> Finished:
    fin = None
    for fin in events:
        pass
    return fin


def sr_vs_reference(lm, reward, cfg: RunConfig) -> dict:
    # the same decision points in both: every third of max_new_tokens, under a budget that fits
    # all N rows with their own copies of the prompt (so memory never forces a different prune)
    p = len(lm.render(cfg.prompt))
    cfg = replace(cfg, progress_every=0, decision="interval", interval=max(1, cfg.max_new_tokens // 3),
                  budget=KVBudget(0, p, shared=False).slots(cfg.n, cfg.max_new_tokens))
    runs = {}
    for name, method in (("engine", speculative_rejection), ("reference_style", speculative_rejection_reference_style)):
        _reset_peak(lm.device)
        fin = _finished(method(lm, reward, cfg))
        runs[name] = {"ledger": fin.ledger.to_dict(), "winner": fin.winner.id, "score": fin.winner.score,
                      "rounds": fin.rounds}
    e, r = runs["engine"]["ledger"], runs["reference_style"]["ledger"]
    return {"n": cfg.n, "alpha": cfg.alpha, "max_new_tokens": cfg.max_new_tokens, "interval": cfg.interval, **runs,
            "wall_ratio": r["wall_s"] / e["wall_s"], "flops_ratio": r["flops"] / e["flops"],
            "memory_ratio": r["peak_memory_bytes"] / max(e["peak_memory_bytes"], 1),
            "same_winner": runs["engine"]["winner"] == runs["reference_style"]["winner"]}


def engine_section(lm, reward, prompt: str, base: RunConfig, *, rows: int, length: int,
                   sweep: list[int], repeats: int = 2, log=lambda msg: None) -> dict:
    sampling = Sampling(base.temperature, base.top_p, base.top_k)
    log(f"limits: matmul and read bandwidth in {lm.dtype}")
    mm, bw = MatmulLimit(lm.device, lm.dtype), ReadBandwidth(lm.device, lm.dtype)
    mm.measure(3)
    bw.measure(3)
    log(f"engine vs generate ({rows} rows x {length} tokens)")
    vs_gen = engine_vs_generate(lm, prompt, rows, length, sampling, base.seed, repeats, mm)
    log("decode step by batch size")
    sw = decode_sweep(lm, prompt, sweep, sampling=sampling, ticks=(mm.measure, bw.measure))
    log("coupling: the same candidates in batches of other sizes")
    coupling = coupling_check(lm, prompt, sampling, base.seed, n=rows, length=length)
    log("Speculative Rejection: engine vs reference-style re-prefill")
    vs_ref = sr_vs_reference(lm, reward, replace(base, prompt=prompt))
    mm.measure(1)
    bw.measure(1)
    limit, band = mm.summary(), bw.summary()
    lim = limit["flops_per_s"]
    vs_gen["engine"]["fraction_of_limit"] = vs_gen["engine"]["flops_per_s"] / lim
    vs_gen["generate"]["fraction_of_limit"] = vs_gen["generate"]["flops_per_s"] / lim
    for s in sw:
        s["fraction_of_limit"] = s["flops_per_s"] / lim
        s.update(roofline_s(lm, s["rows"], s["kv_bytes"], lim, band["bytes_per_s"]))
        s["vs_roofline"] = s["step_s"] / s["roofline_s"]
    return {"device": str(lm.device), "threads": torch.get_num_threads(), "dtype": str(lm.dtype).replace("torch.", ""),
            "kv_sharing": "shared" if lm.shares_prefix else "copied", "weight_bytes": weight_bytes(lm),
            "matmul": limit, "bandwidth": band, "vs_generate": vs_gen, "decode_sweep": sw, "coupling": coupling,
            "vs_reference": vs_ref}

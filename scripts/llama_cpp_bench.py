"""llama.cpp beside this project's engine: one GGUF file, one prompt, the same threads, 1-128 parallel sequences.

    python scripts/llama_cpp_bench.py --build      # once: builds llama-cpp-python into .bench/llama-cpp (~5-25 min)
    python scripts/llama_cpp_bench.py              # quiet machine: the table

Bench-only: llama-cpp-python is not in the app's lock or the CI install. ``--build`` compiles the registry's
source distribution with AVX-512 and without ``GGML_NATIVE`` (the native build crashes at the first decode on
an Intel Xeon with AMX: shared/PERF_NOTES.md). The embedded model is a Q4_1 GGUF; llama.cpp also converts it
to F32 and BF16 files (``llama_model_quantize``, into .bench/), so it is measured at this engine's precision
too (the same dequantised numbers the engine runs) and at the file's own.

For each file and row count: the prompt is decoded once into sequence 0 and shared with every other sequence
(``llama_memory_seq_cp``: one unified KV cache, like this engine's shared prompt); then every step decodes one
token for each of the ``rows`` sequences in one batch (``llama_decode``), logits for every row. Printed: the
median ms of a batch step and tokens/s, beside this engine's step (``specrej.backends.steptime.time_steps``: sampling
included, which llama.cpp's batch step leaves out) in fp32 and bf16, compiled (the default) and eager.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BENCH = ROOT / ".bench"
TARGET = BENCH / "llama-cpp"
VERSION = "0.3.36"
CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON "
              "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF")
PROMPT = "Give me three tips for staying healthy."


def build() -> int:
    env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)}
    # its pure-Python needs beside it (numpy, jinja2 and typing-extensions are already the app's)
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(TARGET), f"llama-cpp-python=={VERSION}",
           "diskcache"]
    print("building:", " ".join(cmd), f"(CMAKE_ARGS={CMAKE_ARGS})", flush=True)
    return subprocess.call(cmd, env=env)


def llama():
    sys.path.insert(0, str(TARGET))
    try:
        import llama_cpp
    except ImportError as e:
        raise SystemExit(f"llama-cpp-python is not built here ({e}): run python scripts/llama_cpp_bench.py --build")
    return llama_cpp


def convert(ll, src: Path, ftype: int, name: str) -> Path:
    out = BENCH / name
    if not out.exists():
        params = ll.llama_model_quantize_default_params()
        params.ftype, params.allow_requantize, params.nthread = ftype, True, os.cpu_count() or 2
        rc = ll.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params))
        if rc != 0:
            raise SystemExit(f"llama_model_quantize to {name} failed ({rc})")
    return out


def llama_steps(ll, path: Path, ids: list[int], rows: int, steps: int, threads: int) -> list[float]:
    """Seconds of each of ``steps`` batch steps (one token for each of ``rows`` sequences), after one warm-up."""
    mp = ll.llama_model_default_params()
    model = ll.llama_model_load_from_file(str(path).encode(), mp)
    cp = ll.llama_context_default_params()
    cp.n_ctx = len(ids) + rows * (steps + 4) + 64
    cp.n_batch = cp.n_ubatch = max(rows, len(ids), 32)
    cp.n_seq_max, cp.kv_unified = rows, True
    cp.n_threads = cp.n_threads_batch = threads
    ctx = ll.llama_init_from_model(model, cp)
    batch = ll.llama_batch_init(max(rows, len(ids)), 0, 1)

    def fill(tokens, positions, seqs):
        batch.n_tokens = len(tokens)
        for i, (t, p, s) in enumerate(zip(tokens, positions, seqs)):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, p, 1
            batch.seq_id[i][0], batch.logits[i] = s, True
        if ll.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    try:
        fill(ids, range(len(ids)), [0] * len(ids))                 # the prompt once, in sequence 0
        mem = ll.llama_get_memory(ctx)
        for s in range(1, rows):
            ll.llama_memory_seq_cp(mem, 0, s, -1, -1)              # shared with every sequence
        times, tok = [], [ids[-1]] * rows
        for step in range(steps + 1):
            t = time.perf_counter()
            fill(tok, [len(ids) + step] * rows, range(rows))
            ll.llama_synchronize(ctx)
            if step:
                times.append(time.perf_counter() - t)
        return times
    finally:
        ll.llama_batch_free(batch)
        ll.llama_free(ctx)
        ll.llama_model_free(model)


def engine_step(dtype: str, compiled_step: bool, ids: list[int], rows: int, steps: int) -> float:
    from specrej.engine import compiled
    from specrej import load_generator
    from specrej.backends.steptime import time_steps

    lm = load_generator("embedded", dtype=dtype)
    st = compiled.step_for(lm.model)              # built (and compiled) once per model
    if compiled_step and st is None:
        return float("nan")
    compiled.use(lm.model, st if compiled_step else None)
    try:
        return statistics.median(time_steps(lm, ids, rows, steps)[0])
    finally:
        compiled.use(lm.model, st)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", action="store_true", help="build llama-cpp-python into .bench/llama-cpp and stop")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 128])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=None, help="default: torch's (the engine's) thread count")
    args = p.parse_args(argv)
    if args.build:
        return build()
    import torch

    from specrej import load_generator
    from specrej.engine.models import EMBEDDED_GGUF, wheel_folder

    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    ll = llama()
    quiet = ll.llama_log_callback(lambda level, text, user: None)   # llama.cpp logs every load: keep the table readable
    ll.llama_log_set(quiet, ctypes.c_void_p())
    ll.llama_backend_init()
    src = wheel_folder(EMBEDDED_GGUF[0]) / EMBEDDED_GGUF[1]
    files = {"Q4_1 (the file)": src, "F32": convert(ll, src, ll.LLAMA_FTYPE_ALL_F32, "smollm2-135m-f32.gguf"),
             "BF16": convert(ll, src, ll.LLAMA_FTYPE_MOSTLY_BF16, "smollm2-135m-bf16.gguf")}
    ids = load_generator("embedded", dtype="fp32").render(PROMPT)
    print(f"prompt: {len(ids)} tokens; {threads} threads; {args.steps} timed steps (medians); "
          f"llama-cpp-python {ll.__version__}", flush=True)
    cols = [("llama.cpp " + k, lambda r, f=f: statistics.median(llama_steps(ll, f, ids, r, args.steps, threads)))
            for k, f in files.items()]
    cols += [(f"engine {dt} {'compiled' if c else 'eager'}", lambda r, dt=dt, c=c: engine_step(dt, c, ids, r, args.steps))
             for dt in ("fp32", "bf16") for c in (True, False)]
    res = {}
    for name, f in cols:
        res[name] = {r: f(r) for r in args.rows}
        print(f"  {name}: " + ", ".join(f"{r} rows {1000 * s:.1f} ms" for r, s in res[name].items()), flush=True)
    print("\nms per batch step (tokens/s):\n")
    print("| rows | " + " | ".join(n for n, _ in cols) + " |\n|---:|" + "---:|" * len(cols))
    for r in args.rows:
        print(f"| {r} | " + " | ".join(f"{1000 * res[n][r]:.1f} ({r / res[n][r]:,.0f})" for n, _ in cols) + " |")
    same = "llama.cpp F32"
    print(f"\nengine fp32 compiled against {same} (llama.cpp's ms / the engine's: above 1 the engine is faster): "
          + ", ".join(f"{r} rows {res[same][r] / res['engine fp32 compiled'][r]:.2f}x" for r in args.rows))
    print("engine bf16 compiled against llama.cpp BF16: "
          + ", ".join(f"{r} rows {res['llama.cpp BF16'][r] / res['engine bf16 compiled'][r]:.2f}x" for r in args.rows))
    print("engine bf16 compiled against llama.cpp Q4_1 (the file as shipped): "
          + ", ".join(f"{r} rows {res['llama.cpp Q4_1 (the file)'][r] / res['engine bf16 compiled'][r]:.2f}x"
                      for r in args.rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

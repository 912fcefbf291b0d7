"""The server's memory over many API sessions (issue 32): RSS at start, after N fresh-session races, and after
those sessions' race views expire (``SPECREJ_SESSION_TTL_S``).

Each race comes from a fresh gradio_client ``Client`` (a session of its own, as a probe or a crowd of API
users makes; the clients run in another process, so only the server's memory is counted), which keeps its race view in Gradio's session state until its time to live passes. The app is
served on loopback with the given models (default: a tiny random 2-layer Llama built here, the test suite's
kind, so the races are quick and what grows is the app's per-session state, not the model's work).

    python scripts/session_memory.py                 # tiny models, 50 sessions, views expire after 20 s
    python scripts/session_memory.py --ttl 100000    # for comparison: views that do not expire meanwhile
    python scripts/session_memory.py --model embedded --reward sentiment --sessions 10
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tiny_models(folder: Path) -> tuple[str, str]:
    """A tiny generator and reward model, saved hub-style (as ``tests/conftest.py`` builds them)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import torch
    import transformers
    from conftest import _llama_config, build_tokenizer

    out = []
    for name, cls, seed, extra in (("lm", "LlamaForCausalLM", 0, {}),
                                   ("reward", "LlamaForSequenceClassification", 1, {"num_labels": 1})):
        torch.manual_seed(seed)
        tok = build_tokenizer()
        getattr(transformers, cls)(_llama_config(tok, **extra)).save_pretrained(folder / name)
        tok.save_pretrained(folder / name)
        out.append(str(folder / name))
    return out[0], out[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="SPECREJ_MODEL (default: a tiny random model built here)")
    p.add_argument("--reward", help="SPECREJ_REWARD (default: a tiny random reward model built here)")
    p.add_argument("--sessions", type=int, default=50)
    p.add_argument("--ttl", type=int, default=20, help="SPECREJ_SESSION_TTL_S for this run")
    p.add_argument("--max-new-tokens", type=int, default=24)
    args = p.parse_args()

    import dataclasses

    import app
    from components import ui
    from components.deploy import gradio_private, memory
    from components.deploy.clients import Guard
    from components.session.context import AppContext
    from components.state.request import RunRequest

    with tempfile.TemporaryDirectory() as tmp:
        model, reward = args.model, args.reward
        if not model or not reward:
            tiny = tiny_models(Path(tmp))
            model, reward = model or tiny[0], reward or f"hf:{tiny[1]}"
        ctx = AppContext.from_env({"SPECREJ_MODEL": model, "SPECREJ_REWARD": reward,
                                   "SPECREJ_SESSION_TTL_S": str(args.ttl)}, trace_dir=str(Path(tmp) / "traces"))
        from components.session import startup

        startup.warm(ctx)
        demo = app.build_demo(ctx, guard=Guard(max_runs_per_client=2))
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        app.launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        url = f"http://127.0.0.1:{port}/"
        request = dataclasses.asdict(RunRequest(prompt="Give me three tips for staying healthy.",
                                                model=ctx.default_model, reward=ctx.default_reward,
                                                n=8, max_new_tokens=args.max_new_tokens))

        def races(seeds) -> int:
            """Races from fresh sessions, one each, run by another process (the clients' own memory is not
            the server's); how many finished."""
            import json
            import subprocess

            code = ("import json, sys\nfrom gradio_client import Client\nurl, request, seeds = json.loads(sys.argv[1])\n"
                    "done = 0\nfor i in seeds:\n    c = Client(url, verbose=False, analytics_enabled=False)\n"
                    "    done += 'Done' in str(c.predict(**dict(request, seed=i), api_name='/run')[0])\n"
                    "    c.close()\nprint(done)\n")
            out = subprocess.run([sys.executable, "-c", code, json.dumps([url, request, list(seeds)])],
                                 capture_output=True, text=True, check=True).stdout
            return int(out.strip().splitlines()[-1])

        def views() -> int:
            return sum(isinstance(v, ui.RunView) for _, s in gradio_private.sessions(demo) for v in s.state_data.values())

        def rss() -> float:
            memory.release()
            return (memory.rss_bytes() or 0) / 2**20

        try:
            assert races([0]) == 1, "the warm-up race did not finish"
            wait = args.ttl + 3 if args.ttl <= 300 else 0   # (a long time to live: the comparison, not waited for)
            time.sleep(wait)   # the warm-up session's view expires too
            start = rss()
            t0 = time.monotonic()
            done = races(range(1, args.sessions + 1))
            took = time.monotonic() - t0
            after = rss()
            held = views()
            time.sleep(wait)   # Gradio's sweep (every second) drops every view past its time to live
            expired = rss()
            print(f"models: {model} / {reward}; {args.sessions} fresh sessions, one race each "
                  f"({done} finished, {took:.0f} s); SPECREJ_SESSION_TTL_S={args.ttl}")
            print("| | RSS | race views held |")
            print("|---|---|---|")
            print(f"| at start (after a warm-up race, its view expired) | {start:.0f} MB | 0 |")
            print(f"| after {args.sessions} fresh-session races | {after:.0f} MB | {held} |")
            print(f"| after their time to live ({args.ttl} s) passed | {expired:.0f} MB | {views()} |" if wait else
                  f"| (time to live {args.ttl} s not waited for) | {expired:.0f} MB | {views()} |")
            print(f"views dropped by their time to live: {ui.EXPIRED['views']}; sessions Gradio holds: "
                  f"{sum(1 for _ in gradio_private.sessions(demo))}")
        finally:
            demo.close()


if __name__ == "__main__":
    main()

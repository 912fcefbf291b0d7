"""A hostile probe of the served app's guards (issues 42 and 50): request classes a visitor can send, counted.

Starts ``python app.py`` as a Space would run it (``SPACE_ID`` set: one trusted proxy in front, the address is the
right-most ``X-Forwarded-For`` entry) on loopback, with tiny random models by default (the test suite's kind: the
guards are what is probed, not the model), sends each request class, and prints per class the HTTP statuses,
then the server's log lines and tracebacks, and its RSS before and after.

    python scripts/probe_guard.py                      # tiny models, 300 junk streams
    python scripts/probe_guard.py --streams 600 --model embedded --reward sentiment
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model")
    p.add_argument("--reward")
    p.add_argument("--streams", type=int, default=300, help="junk event streams of sessions that do not exist")
    p.add_argument("--sessions", type=int, default=1400, help="made-up sessions, each loading the page's state")
    args = p.parse_args()
    import httpx

    tmp = Path(tempfile.mkdtemp(prefix="specrej-probe-"))
    if args.model is None or args.reward is None:
        from session_memory import tiny_models

        lm, reward = tiny_models(tmp)
        args.model, args.reward = args.model or lm, args.reward or f"hf:{reward}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, SPACE_ID="probe/specrej", GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port),
               SPECREJ_MODEL=args.model, SPECREJ_REWARD=args.reward, GRADIO_ANALYTICS_ENABLED="False",
               HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    log_path = tmp / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen([sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    api = base + "/gradio_api"
    out: dict = {"classes": {}}
    try:
        for _ in range(600):
            try:
                if httpx.get(base + "/", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        config = httpx.get(base + "/config", timeout=30).json()
        run_fn = next(i for i, d in enumerate(config["dependencies"]) if d.get("api_name") == "run")
        time.sleep(5)
        out["rss_before_mb"] = round(rss_mb(server.pid))
        lines_before = len(log_path.read_text(errors="replace").splitlines())

        def tally(name, responses):
            out["classes"][name] = dict(collections.Counter(r.status_code for r in responses))

        tally("queue/data of no session", [httpx.get(f"{api}/queue/data", params={"session_hash": f"nosuch{i}"},
                                                     timeout=30) for i in range(args.streams)])
        tally("queue/data, 5 kB session_hash", [httpx.get(f"{api}/queue/data", params={"session_hash": "a" * 5000},
                                                          timeout=30) for _ in range(20)])
        tally("call/run/<no event>", [httpx.get(f"{api}/call/run/nosuch{i}", timeout=30) for i in range(50)])
        tally("queue/join, 500 kB session_hash", [httpx.post(f"{api}/queue/join", timeout=30, json={
            "data": [], "fn_index": run_fn, "session_hash": "s" * 500_000}) for _ in range(5)])
        tally("cancel without event_id", [httpx.post(f"{api}/cancel", json={"fn_index": run_fn, "session_hash": "abc"},
                                                     timeout=30) for _ in range(20)])
        tally("5,000-digit number", [httpx.post(f"{api}/queue/join", content=b'{"data": [' + b"9" * 5000 + b"]}",
                                                headers={"content-type": "application/json"}, timeout=30)
                                     for _ in range(20)])
        tally("nested body", [httpx.post(f"{api}/queue/join", content=b"[" * 5000,
                                         headers={"content-type": "application/json"}, timeout=30) for _ in range(20)])
        # round six (issue 50): Gradio's own input checks, junk ids on GET routes, made-up sessions
        sid = lambda i: f"probe{i:06d}"   # noqa: E731
        tally("run/rerender_race, a choice no chart has", [httpx.post(f"{api}/run/rerender_race", timeout=30, json={
            "data": [None, "zz"], "session_hash": sid(i)}) for i in range(10)])
        tally("run/load_example, index 999999 or 'x'", [httpx.post(f"{api}/run/load_example", timeout=30, json={
            "data": [v], "session_hash": sid(i)}) for i, v in enumerate([999999, "x"] * 5)])
        tally("run/show_parameters [['x']]", [httpx.post(f"{api}/run/show_parameters", timeout=30, json={
            "data": [["x"]], "session_hash": sid(i)}) for i in range(10)])
        tally("GET heartbeat/<%00abc or %0d%0a>", [httpx.get(f"{api}/heartbeat/{v}", timeout=30)
                                                   for v in ["%00abc", "%0d%0a"] * 5])
        tally("GET /pwa_icon/abc", [httpx.get(f"{base}/pwa_icon/abc", timeout=30) for _ in range(10)])
        flood = {}
        for i in range(args.sessions):   # what a page calls as it loads, each under a fresh session hash
            for route, data in (("register", [None]), ("from_link", [])):
                r = httpx.post(f"{api}/run/{route}", json={"data": data, "session_hash": f"flood{i:06d}"}, timeout=30)
                flood[r.status_code] = flood.get(r.status_code, 0) + 1
        out["classes"][f"{args.sessions} made-up sessions (register + from_link)"] = flood
        out["rss_after_flood_mb"] = round(rss_mb(server.pid))
        # seven runs from seven addresses of one IPv6 /64 (the probe of issue 42 saw all seven admitted)
        from gradio_client import Client

        client = Client(base, verbose=False, analytics_enabled=False)
        info = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/run"]["parameters"]
        client.close()
        data = [pm.get("parameter_default") for pm in info]
        names = [pm["parameter_name"] for pm in info]
        data[names.index("prompt")] = "Name three rivers."
        for k, v in (("n", 2), ("max_new_tokens", 4)):
            data[names.index(k)] = v
        kw = dict(zip(names, data))
        # what a run may not carry (issue 50, 7 and round five): blank but for zero-width spaces, control
        # characters, a seed past what a browser's number keeps
        bad = {"prompt of zero-width spaces": {"prompt": "\u200b\u200b"},
               "prompt with control characters": {"prompt": "a\x00b\x07\x1b[31m"},
               "seed 9007199254740993": {"seed": 9007199254740993}}
        refused = {}
        for name, change in bad.items():
            c = Client(base, verbose=False, analytics_enabled=False, headers={"X-Forwarded-For": "6.6.6.7"})
            try:
                result = c.predict(**{**kw, **change}, api_name="/run")
                refused[name] = str(result)[:140]
            except Exception as e:
                refused[name] = str(e)[:140]
            c.close()
        out["refused_runs"] = refused
        # seven runs from seven /64s of one household's /56 (the probe of issue 50 saw all seven admitted when
        # addresses were grouped per /64)
        clients = [Client(base, verbose=False, analytics_enabled=False,
                          headers={"X-Forwarded-For": f"6.6.6.6, 2001:db8:0:{i}::1"}) for i in range(1, 8)]
        jobs = [c.submit(**kw, api_name="/run") for c in clients]   # seven sessions, one /56
        admitted, refusals = 0, []
        for job in jobs:
            try:
                job.result(timeout=600)
                admitted += 1
            except Exception as e:   # the guard's validator: a refusal with its reason
                refusals.append(str(e)[:160])
        for c in clients:
            c.close()
        out["classes"]["seven runs from seven /64s of one IPv6 /56"] = {"admitted": admitted, "refused": len(refusals)}
        out["v6_refusal"] = refusals[0] if refusals else None
        # a session cancelling its own running race (the probe of issue 50 saw "Task exception was never
        # retrieved ... KeyError" once): five times, at a different moment of the race each time
        long = {**kw, "max_new_tokens": 48}
        cancels = []
        for k in range(5):
            c = Client(base, verbose=False, analytics_enabled=False, headers={"X-Forwarded-For": f"6.6.7.{k}"})
            job = c.submit(**long, api_name="/run")
            time.sleep(0.3 * (k + 1))
            cancels.append(bool(job.cancel()))
            time.sleep(1)
            c.close()
        out["classes"]["own race cancelled"] = {"cancel answered": sum(cancels), "times": len(cancels)}
        time.sleep(2)
        out["rss_after_mb"] = round(rss_mb(server.pid))
        text = log_path.read_text(errors="replace")
        lines = text.splitlines()
        out["log_lines_during_probe"] = len(lines) - lines_before
        out["log_bytes"] = len(text.encode())
        out["tracebacks"] = text.count("Traceback")
        out["exception_in_asgi"] = text.count("Exception in ASGI application")
        out["http_500"] = sum(c.get(500, 0) for c in out["classes"].values())
        out["key_errors"] = text.count("KeyError")
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

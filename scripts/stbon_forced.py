"""Where ST-BoN truncated in the committed graded and rivals benches, and whether memory forced it (issue 63, 4).

    python scripts/stbon_forced.py                 # writes assets/bench/stbon_forced.json, prints a markdown table
    python scripts/stbon_forced.py --merge         # writes its flags into graded.json and rivals.json's ST-BoN rows

ST-BoN truncates at c + tau (c: the earliest step at which every pair of its answers differs; tau = c, the paper's
buffer), or earlier where its N rows would overflow the memory budget first: then the Round says ``forced``. The
committed bench records keep the truncation's token but not c nor the flag, so this re-runs ST-BoN live on each
committed prompt at the bench's own settings (the embedded generator in fp32, the instruction judge, N = 32, 64 new
tokens, 512 slots, seed 0: ``bench.protocol.rival_settings``) and reads its Round: c, c + tau, the token it
truncated at, forced or not; and checks the re-run against the committed record (winner, steps, tokens, the
truncation's token). One ST-BoN run a prompt (~2 s each on two quiet cores, 11 s in one thread on a loaded one).

``--merge``: each committed ST-BoN record (``stbon`` and ``stbon:pick=paper``: the same truncation, the pick differs
after it) gets ``forced`` and ``diverged`` from the re-run, where the re-run matched the committed record, so
``python -m specrej.bench --from`` counts and names the forced prompts (``aggregate``'s ``forced``) as a new bench
run records them itself (``protocol._rival_entry``).
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def merge() -> int:
    found = json.loads((ROOT / "assets" / "bench" / "stbon_forced.json").read_text(encoding="utf-8"))
    for name, got in found["benches"].items():
        path = ROOT / "assets" / "bench" / f"{name}.json"
        bench = json.loads(path.read_text(encoding="utf-8"))
        by_id = {r["id"]: r for r in got["rows"]}
        merged = 0
        for rec in bench["prompts"]:
            row = by_id.get(rec["id"])
            committed = next((e for e in rec["sr"] if e.get("label") == "stbon"), None)
            # the flag rests on where it truncated and how many rows ran (memory), not on which answer it kept: a
            # re-run that kept another (if-31: a vote tied to float noise, one thread against the run's two) but
            # truncated at the same token with the same steps and tokens carries the same flag
            if row is None or committed is None or not (
                    [row["truncated"]] == [d["position"] for d in committed["decisions"]]
                    and row["steps"] == committed["steps"] and row["generated_tokens"] == committed["generated_tokens"]):
                continue
            for e in rec["sr"]:
                if e.get("method") == "stbon":
                    e["forced"], e["diverged"] = row["forced"], row["diverged"]
                    merged += 1
        path.write_text(json.dumps(bench, indent=1), encoding="utf-8")
        print(f"{name}: {merged} ST-BoN records flagged ({len(got['forced'])} of {got['of']} prompts forced)")
    return 0


def main() -> int:
    if "--merge" in sys.argv[1:]:
        return merge()
    import torch

    from specrej import RunConfig, load_generator, load_reward
    from specrej.bench.protocol import _drain, rival_settings
    from specrej.methods import METHODS

    torch.set_num_threads(1)   # a shared machine: one thread does not fight the others for the two cores
    lm = load_generator("embedded", dtype="fp32")
    reward = load_reward("instructions")
    out = {"meta": {"what": "ST-BoN re-run live on each committed prompt: its divergence step c, c + tau, the token "
                            "it truncated at, and whether memory forced it (the Round's forced)",
                    "command": "python scripts/stbon_forced.py", "date": time.strftime("%Y-%m-%d", time.gmtime())},
           "benches": {}}
    lines = ["| bench | prompt | P | rows | c | c + tau | truncated at | forced | same as committed |",
             "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for name in ("graded", "rivals"):
        bench = json.loads((ROOT / "assets" / "bench" / f"{name}.json").read_text(encoding="utf-8"))
        meta, rows = bench["meta"], []
        base = RunConfig(prompt="-", n=meta["n_ref"], max_new_tokens=meta["max_new_tokens"], seed=meta["seed"],
                         budget=meta["budget"], progress_every=0)
        for rec in bench["prompts"]:
            committed = next(e for e in rec["sr"] if e.get("label") == "stbon")
            cfg = replace(rival_settings(base, meta["n_ref"]), prompt=rec["prompt"], budget=rec["budget"])
            t0 = time.perf_counter()
            fin, rounds = _drain(METHODS["stbon"](lm, reward, cfg))
            print(f"{rec['id']}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
            cut = rounds[0] if rounds else None
            marks = dict(cut.marks) if cut is not None else {}
            c = marks.get("diverged")
            row = {"id": rec["id"], "prompt_tokens": rec["prompt_tokens"], "n": len(fin.candidates),
                   "diverged": c, "c_plus_tau": (c + max(1, int(c))) if c is not None else None,
                   "truncated": cut.position if cut is not None else None,
                   "forced": bool(cut.forced) if cut is not None else False,
                   "winner": fin.winner.id, "steps": fin.ledger.steps, "generated_tokens": fin.ledger.generated_tokens}
            row["same_as_committed"] = (row["winner"] == committed["winner"] and row["steps"] == committed["steps"]
                                        and row["generated_tokens"] == committed["generated_tokens"]
                                        and [row["truncated"]] == [d["position"] for d in committed["decisions"]])
            rows.append(row)
            lines.append(f"| {name} | {row['id']} | {row['prompt_tokens']} | {row['n']} | {c if c is not None else '-'} "
                         f"| {row['c_plus_tau'] if c is not None else '-'} | {row['truncated']} "
                         f"| {'**forced**' if row['forced'] else 'no'} | {'yes' if row['same_as_committed'] else 'NO'} |")
            print(lines[-1], flush=True)
        forced = [r["id"] for r in rows if r["forced"]]
        out["benches"][name] = {"rows": rows, "forced": forced, "of": len(rows)}
        lines.append(f"| {name} | **forced on {len(forced)} of {len(rows)}**: {', '.join(forced)} | | | | | | | |")
    (ROOT / "assets" / "bench" / "stbon_forced.json").write_text(json.dumps(out, indent=1), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A run's numbers as JSON: winners, ledgers, comparisons and verdicts (the page's JSON panel and the
trace both hold this). Imports only ``specrej`` and the run's view."""
from __future__ import annotations

from specrej import Candidate

from components.state.shared import gpu_steps
from components.state.view import RunView


def _cand(c: Candidate) -> dict:
    return {"id": c.id, "score": c.score, "tokens": c.tokens, "finish_reason": c.finish_reason, "text": c.text}


def summary_dict(view: RunView) -> dict:
    """Winners, ledgers and the comparisons: JSON-ready (the same numbers the trace holds)."""
    out: dict = {"prompt": view.cfg.prompt, "generator": view.model_label, "reward": view.reward_label,
                 "state": str(view.state), "config": view.cfg.flat(), "baseline": view.baseline, "arms": {}}
    for a, arm in view.arms.items():
        f = arm.finished
        out["arms"][a] = {
            "name": arm.spec.label, "spec": arm.spec.spec, "method": arm.spec.method,
            "winner": _cand(f.winner) if f else None,
            "rounds": f.rounds if f else len(arm.rounds),
            "ledger": arm.ledger.to_dict(),
        }
    out["comparison"] = {a: c.to_dict() for a, c in view.comparisons().items()} or None
    out["verdict"] = {a: v.to_dict() for a, v in view.verdicts().items()} or None
    out["time_unit"] = "seconds" if view.step is not None else "decoding steps"
    gpu, on_gpu = view.gpu_verdicts(gpu_steps())
    out["gpu_verdict"] = ({"measured": gpu.describe(), "file": gpu.source, "device": gpu.device_name,
                           "config": gpu.config, "variant": gpu.variant, "date": gpu.date,
                           "verdict": {a: v.to_dict() for a, v in on_gpu.items()}} if on_gpu else None)
    out["first_event_s"] = view.first_event_s
    return out

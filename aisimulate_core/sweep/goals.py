"""What a point scored: derived metrics, feasibility, the chosen point, the Pareto front."""

from __future__ import annotations

import math
from typing import Any, Sequence

from aisimulate_core.sweep.spec import Goal

DEFAULT_GOODPUT_METRIC = "goodput_request_throughput_rps"
# derived per point, at the top level of a ledger row (beside "summary")
DERIVED = ("gpus", "good_fraction", "output_throughput_per_gpu", "goodput_per_gpu")


def derived(summary: dict | None, gpus: int | None) -> dict[str, Any]:
    """``good_fraction``: requests within the SLA / requests that arrived; throughputs per GPU."""
    out: dict[str, Any] = {"good_fraction": None, "output_throughput_per_gpu": None,
                           "goodput_per_gpu": None}
    if not summary:
        return out
    good, total = summary.get("goodput_completed_requests"), summary.get("num_requests")
    if isinstance(good, (int, float)) and isinstance(total, (int, float)) and total > 0:
        out["good_fraction"] = good / total
    if gpus:
        if isinstance(summary.get("output_throughput_tok_s"), (int, float)):
            out["output_throughput_per_gpu"] = summary["output_throughput_tok_s"] / gpus
        if isinstance(summary.get("goodput_output_throughput_tok_s"), (int, float)):
            out["goodput_per_gpu"] = summary["goodput_output_throughput_tok_s"] / gpus
    return out


def value(row: dict, key: str) -> float | None:
    """A numeric metric of a row: a summary key, else a derived one; None when absent."""
    summary = row.get("summary") or {}
    found = summary.get(key, row.get(key))
    if isinstance(found, bool) or not isinstance(found, (int, float)) or not math.isfinite(found):
        return None
    return found


def feasible(row: dict, goal: Goal) -> bool:
    """The point ran and, when the goal sets one, kept its share of requests within the SLA."""
    if row.get("status") != "ok":
        return False
    if goal.min_good_fraction is None:
        return True
    fraction = row.get("good_fraction")
    return fraction is not None and fraction >= goal.min_good_fraction - 1e-12


def goal_metric(goal: Goal) -> str:
    """The key the goal ranks points by (``gpus`` for min_gpus)."""
    return {"min_gpus": "gpus", "max_throughput_per_gpu": "output_throughput_per_gpu",
            "max_goodput": goal.metric or DEFAULT_GOODPUT_METRIC}.get(goal.kind, "")


def _rank_key(row: dict, goal: Goal) -> tuple:
    """Smaller is better; ties go to fewer GPUs, more requests within SLA, then grid order."""
    gpus = value(row, "gpus")
    gpus = math.inf if gpus is None else gpus
    fraction = row.get("good_fraction") or 0.0
    order = row.get("point", 0)
    if goal.kind == "min_gpus":
        goodput = value(row, DEFAULT_GOODPUT_METRIC) or 0.0
        return (gpus, -fraction, -goodput, order)
    metric = value(row, goal_metric(goal))
    return (-(metric if metric is not None else -math.inf), gpus, -fraction, order)


def choose(rows: Sequence[dict], goal: Goal) -> dict | None:
    """The best feasible row for the goal (a pareto goal: the front's knee), or None."""
    candidates = [row for row in rows if feasible(row, goal)]
    if goal.kind == "pareto":
        return knee(pareto_front(candidates, goal), goal)
    candidates = [row for row in candidates if goal.kind == "min_gpus" or
                  value(row, goal_metric(goal)) is not None]
    return min(candidates, key=lambda row: _rank_key(row, goal)) if candidates else None


def _signed(row: dict, goal: Goal) -> tuple[float, float] | None:
    """The two pareto metrics, each turned so that larger is better."""
    out = []
    for metric, direction in zip(goal.metrics, goal.directions):
        found = value(row, metric)
        if found is None:
            return None
        out.append(found if direction == "max" else -found)
    return out[0], out[1]


def pareto_front(rows: Sequence[dict], goal: Goal) -> list[dict]:
    """The feasible rows no other row beats on both metrics, in order of the first metric."""
    scored = [(s, row) for row in rows if feasible(row, goal) and (s := _signed(row, goal)) is not None]
    front = [row for s, row in scored
             if not any(o[0] >= s[0] and o[1] >= s[1] and o != s for o, _ in scored)]
    return sorted(front, key=lambda row: (_signed(row, goal), -row.get("point", 0)))


def knee(front: Sequence[dict], goal: Goal) -> dict | None:
    """The front point closest to the ideal (the best of each metric), both metrics scaled to
    [0, 1] over the front; ties go to grid order."""
    if not front:
        return None
    scores = [_signed(row, goal) for row in front]
    lows = [min(s[i] for s in scores) for i in (0, 1)]
    highs = [max(s[i] for s in scores) for i in (0, 1)]

    def distance(item):
        s, row = item
        gaps = [(highs[i] - s[i]) / (highs[i] - lows[i]) if highs[i] > lows[i] else 0.0 for i in (0, 1)]
        return (math.hypot(*gaps), row.get("point", 0))

    return min(zip(scores, front), key=distance)[1]

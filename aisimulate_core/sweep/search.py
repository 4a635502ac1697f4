"""Search policies over a sweep's grid: every point, bisection on one monotone axis, Optuna.

Each policy asks ``Sweep.evaluate(points)`` for batches of grid points (tuples of value
indices) and reads the rows back; the sweep runs the points not already in its ledger.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from aisimulate_core.sweep.executors import missing_extra
from aisimulate_core.sweep.goals import feasible, goal_metric, value
from aisimulate_core.sweep.spec import DEFAULT_TRIALS


def run_grid(sweep) -> dict[str, Any]:
    points = list(sweep.spec.points())
    sweep.expected = len(points)
    sweep.evaluate(points)
    return {}


def _probes(lo: int, hi: int, count: int) -> list[int]:
    """Up to ``count`` indices strictly between ``lo`` and ``hi``, evenly spread."""
    span = hi - lo
    count = max(1, min(count, span - 1))
    return sorted({min(hi - 1, max(lo + 1, lo + round(span * j / (count + 1))))
                   for j in range(1, count + 1)})


def _bisect_lines(spec, at: int) -> list[tuple[dict, list[tuple]]]:
    """The lines bisect searches, each ``({other axis: label}, [grid points in the axis's
    order])``: one per combination of the other axes; on a deployment axis, one per shape
    family and combination, its shapes in order of scale."""
    axis = spec.axes[at]
    rest = [(j, a) for j, a in enumerate(spec.axes) if j != at]
    if axis.is_deployment:
        families: dict[str, list[int]] = {}
        for i, shape in enumerate(axis.values):
            families.setdefault(shape.family, []).append(i)
        runs = [(name, sorted(indices, key=lambda i: axis.values[i].scale))
                for name, indices in families.items()]
    else:
        runs = [(None, list(range(len(axis.values))))]
    lines = []
    for group in itertools.product(*(range(len(a.values)) for _, a in rest)):
        others = {a.name: a.label(i) for (_, a), i in zip(rest, group)}
        for family, indices in runs:
            named = others if family is None else {"family": family, **others}
            lines.append((named, [(*group[:at], i, *group[at:]) for i in indices]))
    return lines


def run_bisect(sweep) -> dict[str, Any]:
    """For each combination of the other axes (and, on a deployment axis, each shape family),
    the smallest value of the axis whose point is feasible, assuming feasibility never falls
    as the axis grows (a failed point counts as infeasible). Each round probes every open
    interval at once, several probes per interval when there are more jobs than intervals (a
    k-ary search)."""
    spec = sweep.spec
    at = [axis.name for axis in spec.axes].index(spec.search.axis)
    lines = _bisect_lines(spec, at)
    bounds = [[-1, len(points)] for _, points in lines]  # (largest infeasible, smallest feasible)
    sweep.expected = sum(max(1, math.ceil(math.log2(len(points) + 1))) for _, points in lines)
    while True:
        open_lines = [n for n, (lo, hi) in enumerate(bounds) if hi - lo > 1]
        if not open_lines:
            break
        per_line = max(1, sweep.jobs // len(open_lines))
        probes = {n: _probes(*bounds[n], per_line) for n in open_lines}
        batch = [lines[n][1][i] for n in open_lines for i in probes[n]]
        rows = dict(zip(batch, sweep.evaluate(batch)))
        for n in open_lines:
            lo, hi = bounds[n]
            good = [i for i in probes[n] if feasible(rows[lines[n][1][i]], spec.goal)]
            hi = min([hi, *good])
            lo = max([lo, *(i for i in probes[n] if i < hi and i not in good)])
            bounds[n] = [lo, hi]
        # the count shown with the progress line: what is done and what bisection still needs
        sweep.expected = sweep.progress.done + sum(
            math.ceil(math.log2(hi - lo)) for lo, hi in bounds if hi - lo > 1)
    axis = spec.axes[at]
    minima = [{"others": others, "minimum": axis.label(points[hi][at]) if hi < len(points) else None}
              for (others, points), (_, hi) in zip(lines, bounds)]
    return {"bisect": {"axis": axis.name, "minima": minima}}


def _optuna():
    try:
        import optuna
    except ImportError:
        raise missing_extra("optuna", "search policy optuna") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _numeric(values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def run_optuna(sweep) -> dict[str, Any]:
    """TPE (NSGA-II for pareto) over the axes' value indices, ``trials`` points (default
    min(50, grid size)) asked ``jobs`` at a time and told in the order asked, so a seed gives
    the same trials whatever the executor. A point already evaluated is not run again; the
    search stops early once every point of the grid is known."""
    optuna = _optuna()
    spec = sweep.spec
    goal, search = spec.goal, spec.search
    pareto = goal.kind == "pareto"
    constrained = goal.min_good_fraction is not None

    # optuna >= 5 keeps constraints on the trial (set_constraint); older ones ask a function
    on_trial = hasattr(optuna.trial.Trial, "set_constraint")

    def constraints(trial):
        return trial.user_attrs.get("constraint", (1.0,))

    sampler_name = search.sampler or ("nsga2" if pareto else "tpe")
    kwargs = {"seed": search.seed}
    if constrained and not on_trial:
        kwargs["constraints_func"] = constraints
    if sampler_name == "nsga2":
        sampler = optuna.samplers.NSGAIISampler(**kwargs)
    else:
        sampler = optuna.samplers.TPESampler(**kwargs)
    if pareto:
        directions = ["maximize" if d == "max" else "minimize" for d in goal.directions]
        metrics = list(goal.metrics)
    else:
        directions = ["minimize" if goal.kind == "min_gpus" else "maximize"]
        metrics = [goal_metric(goal)]
    study = optuna.create_study(directions=directions, sampler=sampler)
    total = min(search.trials or min(DEFAULT_TRIALS, spec.size), 10 * spec.size)
    sweep.expected = min(total, spec.size)
    asked = 0
    while asked < total and len(sweep.rows_by_point) < spec.size:
        trials = [study.ask() for _ in range(min(sweep.jobs, total - asked))]
        asked += len(trials)
        batch = []
        for trial in trials:
            indices = []
            for axis in spec.axes:
                if _numeric(axis.values):
                    indices.append(trial.suggest_int(axis.name, 0, len(axis.values) - 1))
                else:
                    indices.append(trial.suggest_categorical(axis.name, list(range(len(axis.values)))))
            batch.append(tuple(indices))
        for trial, row in zip(trials, sweep.evaluate(batch)):
            scores = [value(row, m) for m in metrics]
            if row.get("status") != "ok" or any(s is None for s in scores):
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            if constrained:
                fraction = row.get("good_fraction")
                excess = goal.min_good_fraction - (fraction or 0.0)
                if on_trial:
                    trial.set_constraint("good_fraction", excess)
                else:
                    trial.set_user_attr("constraint", (excess,))
            study.tell(trial, scores if pareto else scores[0])
    return {"optuna": {"trials": asked, "sampler": sampler_name, "seed": search.seed}}


POLICIES = {"grid": run_grid, "bisect": run_bisect, "optuna": run_optuna}

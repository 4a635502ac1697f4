"""Plots of a sweep's results ledger: the goal metric against a swept axis, and a Pareto front.

Both take the ledger's points as plain dicts, one per evaluated point:

* ``overrides``: ``{payload path: value}``, the values this point set (``{"spec.topology.workers.
  initial_workers": 4, ...}``);
* the report's summary keys, either at the top level of the point or under ``summary``
  (``{"summary": {"goodput_completed_requests": 1990, ...}}``); a key is looked up under
  ``summary`` first;
* ``status``: ``"ok"`` (or absent) for a point that ran; anything else (``"failed"``) marks a
  point without results, drawn as a cross.

A point, in ``chosen`` or ``front``, is given as one of the dicts of ``points`` or as its index
in ``points``. Nothing here imports matplotlib until a plot is drawn.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from aisimulate_core.viz.figure import Plot, PlotError, new_figure, number, save_png

OK_STATUSES = (None, "ok")


def point_value(point: Mapping[str, Any], key: str) -> Any:
    """``key`` of a ledger point: an override first, then a summary key (under ``summary`` or
    at the top level); None when the point has no such key."""
    overrides = point.get("overrides")
    if isinstance(overrides, Mapping) and key in overrides:
        return overrides[key]
    summary = point.get("summary")
    if isinstance(summary, Mapping) and key in summary:
        return summary[key]
    return point.get(key)


def point_ok(point: Mapping[str, Any]) -> bool:
    return point.get("status") in OK_STATUSES


def _resolve(which: Any, points: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    if which is None:
        return None
    if isinstance(which, int) and not isinstance(which, bool):
        if not 0 <= which < len(points):
            raise PlotError(f"point index {which} is outside the {len(points)} points")
        return points[which]
    if isinstance(which, Mapping):
        return which
    raise PlotError(f"a point is a dict of the ledger or its index, got {type(which).__name__}")


def _label(overrides: Mapping[str, Any] | None, skip: str) -> str:
    if not isinstance(overrides, Mapping):
        return ""
    return ", ".join(f"{_short(key)}={value}" for key, value in overrides.items() if key != skip)


def _short(path: str) -> str:
    """The last part of a payload path (``spec.topology.workers.initial_workers`` ->
    ``initial_workers``), enough to tell lines apart in a legend."""
    return str(path).rsplit(".", 1)[-1]


def plot_goal_vs_axis(points: Sequence[Mapping[str, Any]], axis: str, metric: str,
                      sla_line: float | None, chosen: Any, path: str | os.PathLike) -> Plot:
    """The goal ``metric`` (a summary key such as ``goodput_completed_requests``) against the
    swept ``axis`` (an override path, or a summary key such as ``gpu_hours``), as a PNG at
    ``path``.

    Points that differ in their other overrides are drawn as separate lines (one per
    combination, labelled with it, in order of first appearance). ``sla_line`` (a number in the
    metric's units, or None) is drawn as a dashed horizontal line; ``chosen`` (a point or its
    index, or None) is marked with a star. Points that failed (``status`` not ``"ok"``) or have
    no numeric metric are crosses on the axis. A numeric axis is sorted; an axis of text values
    (preset names) keeps their order of first appearance.

    Returns a ``Plot`` whose ``series`` is ``{"axis", "metric", "lines": [{"label", "x", "y"}],
    "failed": [{"label", "x"}], "sla": sla_line, "chosen": {"x", "y"} or None}``, with x the
    axis values as the points give them.
    """
    lines: dict[str, dict[str, list]] = {}
    failed = []
    for point in points:
        x = point_value(point, axis)
        if x is None:
            continue
        label = _label(point.get("overrides"), axis)
        y = number(point_value(point, metric))
        if not point_ok(point) or y is None:
            failed.append({"label": label, "x": x})
            continue
        line = lines.setdefault(label, {"label": label, "x": [], "y": []})
        line["x"].append(x)
        line["y"].append(y)
    every_x = [x for line in lines.values() for x in line["x"]] + [f["x"] for f in failed]
    if not every_x:
        raise PlotError(f"no point has a value for {axis!r}")
    numeric = all(number(x) is not None for x in every_x)
    categories: list = []
    if numeric:
        for line in lines.values():
            order = sorted(range(len(line["x"])), key=lambda i: line["x"][i])
            line["x"] = [line["x"][i] for i in order]
            line["y"] = [line["y"][i] for i in order]
    else:
        for x in every_x:
            if x not in categories:
                categories.append(x)

    def position(x: Any) -> float:
        return float(x) if numeric else float(categories.index(x))

    figure, (ax,) = new_figure(width=8.0, height=5.0)
    for line in lines.values():
        ax.plot([position(x) for x in line["x"]], line["y"], marker="o",
                label=line["label"] or metric)
    if failed:
        ax.plot([position(f["x"]) for f in failed], [0.03] * len(failed), linestyle="none",
                marker="x", color="tab:red", markersize=9, label="failed",
                transform=ax.get_xaxis_transform(), clip_on=False)
    if sla_line is not None:
        ax.axhline(float(sla_line), linestyle="--", color="tab:gray", label=f"target {sla_line:g}")
    chosen_point = _resolve(chosen, points)
    chosen_xy = None
    if chosen_point is not None:
        cx, cy = point_value(chosen_point, axis), number(point_value(chosen_point, metric))
        if cx is not None and cy is not None:
            chosen_xy = {"x": cx, "y": cy}
            ax.plot([position(cx)], [cy], marker="*", markersize=18, color="gold",
                    markeredgecolor="black", linestyle="none", label="chosen", zorder=5)
    if not numeric:
        ax.set_xticks(range(len(categories)), [str(c) for c in categories])
    elif all(isinstance(x, int) for x in every_x):
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(axis)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} against {_short(axis)}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    written = save_png(figure, path)
    return Plot(written, {"axis": axis, "metric": metric, "lines": list(lines.values()),
                          "failed": failed, "sla": sla_line, "chosen": chosen_xy})


def plot_pareto(points: Sequence[Mapping[str, Any]], x_metric: str, y_metric: str,
                front: Sequence[Any] | None, chosen: Any, path: str | os.PathLike) -> Plot:
    """Every point that ran as ``x_metric`` against ``y_metric`` (summary keys, e.g.
    ``output_throughput_tok_s`` per GPU against per user), the Pareto ``front`` (points or
    indices, as the sweep found it; drawn joined in order of x; None draws no front) and the
    ``chosen`` point (a point or its index, or None) starred and labelled with its overrides,
    as a PNG at ``path``.

    Returns a ``Plot`` whose ``series`` is ``{"x_metric", "y_metric", "points": {"x", "y"},
    "front": {"x", "y"}, "chosen": {"x", "y", "label"} or None, "failed": count}``; points
    that failed or lack either metric are left out of ``points`` and counted in ``failed``.
    """
    xs, ys, failed = [], [], 0
    for point in points:
        x, y = number(point_value(point, x_metric)), number(point_value(point, y_metric))
        if not point_ok(point) or x is None or y is None:
            failed += 1
            continue
        xs.append(x)
        ys.append(y)
    if not xs:
        raise PlotError(f"no point has both {x_metric!r} and {y_metric!r}")
    front_xy = []
    for which in front or ():
        member = _resolve(which, points)
        x, y = number(point_value(member, x_metric)), number(point_value(member, y_metric))
        if x is not None and y is not None:
            front_xy.append((x, y))
    front_xy.sort()
    figure, (ax,) = new_figure(width=8.0, height=6.0)
    ax.scatter(xs, ys, color="tab:blue", alpha=0.6, label="points")
    if front_xy:
        ax.plot([x for x, _ in front_xy], [y for _, y in front_xy], color="tab:orange",
                marker="o", label="Pareto front")
    chosen_point = _resolve(chosen, points)
    chosen_xy = None
    if chosen_point is not None:
        cx, cy = number(point_value(chosen_point, x_metric)), number(point_value(chosen_point, y_metric))
        if cx is not None and cy is not None:
            label = _label(chosen_point.get("overrides"), skip="")
            chosen_xy = {"x": cx, "y": cy, "label": label}
            ax.plot([cx], [cy], marker="*", markersize=18, color="gold", markeredgecolor="black",
                    linestyle="none", label="chosen", zorder=5)
            if label:
                ax.annotate(label, (cx, cy), textcoords="offset points", xytext=(8, 8),
                            fontsize="small")
    ax.set_xlabel(x_metric)
    ax.set_ylabel(y_metric)
    ax.set_title(f"{y_metric} against {x_metric}" + (f" ({failed} failed)" if failed else ""))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    written = save_png(figure, path)
    return Plot(written, {"x_metric": x_metric, "y_metric": y_metric,
                          "points": {"x": xs, "y": ys},
                          "front": {"x": [x for x, _ in front_xy], "y": [y for _, y in front_xy]},
                          "chosen": chosen_xy, "failed": failed})

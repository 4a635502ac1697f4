"""Latency CDFs of several runs overlaid, one line per run in each of the four panels."""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Sequence

from aisimulate_core.viz.figure import Plot, PlotError, new_figure, save_png
from aisimulate_core.viz.runs import FROM_RECORDS, LATENCIES, latency_series, scale_latency_axis


def plot_cdf_overlay(runs: Sequence[tuple[str, Iterable[Mapping[str, Any]] | None,
                                          Mapping[str, Any] | None]],
                     path: str | os.PathLike) -> Plot:
    """``runs``: ``(label, records or None, report summary or None)`` per run. Each panel
    (TTFT, ITL, TPOT, E2E) overlays the runs' CDFs as ``plot_latency_cdfs`` draws one run's
    (from the records where given, else the report's percentiles; ITL always from the report).

    ``series``: ``{"ttft" | "itl" | "tpot" | "e2e": [{"label", "x", "y", "source"}, ...]}``
    in the runs' order (a run without that latency is left out of its list).
    """
    if len(runs) < 1:
        raise PlotError("no run to draw")
    series: dict[str, list[dict]] = {name: [] for name, _, _, _ in LATENCIES}
    for label, records, summary in runs:
        for name, data in latency_series(records, summary).items():
            series[name].append({"label": label, **data})
    if not any(series.values()):
        raise PlotError("no latency to draw in any run")
    figure, axes = new_figure(2, 2, width=10.0, height=7.5)
    for ax, (name, title, _, _) in zip(axes, LATENCIES):
        ax.set_title(title)
        ax.set_xlabel("ms")
        ax.grid(True, alpha=0.3)
        for line in series[name]:
            if line["source"] == FROM_RECORDS:
                ax.step(line["x"], line["y"], where="post", label=line["label"])
            else:
                ax.plot(line["x"], line["y"], marker="o", label=f"{line['label']} (percentiles)")
        if series[name]:
            ax.set_ylim(0, 1.02)
            scale_latency_axis(ax, [line["x"] for line in series[name]])
            ax.legend(fontsize="small", loc="lower right")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    written = save_png(figure, path)
    return Plot(written, series)

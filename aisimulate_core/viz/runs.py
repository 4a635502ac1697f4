"""Pictures of one run: latency CDFs, a per-request timeline, and the cluster over time.

The data come from what ``aisimulate run`` writes: the report (its summary keys and
``lifecycle_operations``), the per-request records (dicts as in ``--per-request``) and the
telemetry samples (dicts as in ``--telemetry``). The series-building functions here are plain
Python; only the ``plot_*`` functions load matplotlib.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Sequence

from aisimulate_core.viz.figure import Plot, PlotError, new_figure, number, save_png

# (series name, panel title, record key, the report's key stem); the record's ``itl_ms`` is a
# request's mean gap, the report's TPOT. Records carry no per-token times, so the ITL panel
# (every gap) is drawn from the report's ITL percentiles.
LATENCIES = (
    ("ttft", "TTFT", "ttft_ms", "ttft"),
    ("itl", "ITL (every token gap)", None, "itl"),
    ("tpot", "TPOT", "itl_ms", "tpot"),
    ("e2e", "E2E latency", "e2e_latency_ms", "e2e_latency"),
)
# the report's quantile keys of a distribution and the fraction each one stands for
REPORT_QUANTILES = (("min", 0.0), ("median", 0.5), ("p75", 0.75), ("p90", 0.9), ("p95", 0.95),
                    ("p99", 0.99), ("max", 1.0))
FROM_RECORDS, FROM_REPORT = "records", "report percentiles"
# the record keys the run plots read (a caller reading a large records file keeps only these)
RECORD_KEYS = ("uuid", "terminal_status", "arrival_time_ms", "first_token_ms",
               "terminal_time_ms", "ttft_ms", "itl_ms", "e2e_latency_ms")


def cdf(values: Iterable[float]) -> dict[str, list[float]]:
    """The empirical CDF of ``values``: x sorted, y[i] = (i + 1) / n."""
    xs = sorted(values)
    n = len(xs)
    return {"x": xs, "y": [(i + 1) / n for i in range(n)]}


def report_quantiles(summary: Mapping[str, Any], stem: str) -> dict[str, list[float]] | None:
    """The CDF outline the report's ``{min,median,p75,...,max}_{stem}_ms`` keys give, or None."""
    xs, ys = [], []
    for prefix, fraction in REPORT_QUANTILES:
        value = number(summary.get(f"{prefix}_{stem}_ms"))
        if value is not None:
            xs.append(value)
            ys.append(fraction)
    return {"x": xs, "y": ys} if xs else None


def latency_samples(records: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Per latency series (``ttft``, ``tpot``, ``e2e``), the values of the completed records:
    the samples the report's percentiles are taken over."""
    keys = [(name, key) for name, _, key, _ in LATENCIES if key is not None]
    samples: dict[str, list[float]] = {name: [] for name, _ in keys}
    for record in records:
        if record.get("terminal_status") != "completed":
            continue
        for name, key in keys:
            value = number(record.get(key))
            if value is not None:
                samples[name].append(value)
    return samples


def latency_series(records: Iterable[Mapping[str, Any]] | None,
                   summary: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Each latency's CDF with its ``source``: the records where they have it, else the
    report's percentiles; a latency neither has is left out."""
    samples = latency_samples(records) if records is not None else {}
    series = {}
    for name, _, _, stem in LATENCIES:
        if samples.get(name):
            series[name] = {**cdf(samples[name]), "source": FROM_RECORDS}
        elif summary is not None and (outline := report_quantiles(summary, stem)) is not None:
            series[name] = {**outline, "source": FROM_REPORT}
    return series


def scale_latency_axis(ax, lines: Iterable[Sequence[float]]) -> str:
    """A log time axis where the values span more than two decades (a long tail would squash
    the body of the CDF against the left edge), else linear; returns the scale set."""
    positive = [x for xs in lines for x in xs if x > 0]
    scale = "log" if positive and max(positive) > 100 * min(positive) else "linear"
    ax.set_xscale(scale)
    ax.set_xlabel("ms (log scale)" if scale == "log" else "ms")
    return scale


def plot_latency_cdfs(records: Iterable[Mapping[str, Any]] | None,
                      summary: Mapping[str, Any] | None, path: str | os.PathLike) -> Plot:
    """TTFT, ITL, TPOT and E2E CDFs in four panels, as a PNG at ``path``.

    TTFT, TPOT and E2E are the empirical CDFs of the completed ``records`` (``ttft_ms``,
    ``itl_ms``, ``e2e_latency_ms``); without records, and for ITL always (records hold no
    per-token times), the report ``summary``'s min/median/p75/p90/p95/p99/max outline.

    ``series``: ``{"ttft" | "itl" | "tpot" | "e2e": {"x": ms, "y": fraction, "source":
    "records" | "report percentiles"}}``; a panel whose values span more than two decades is
    drawn on a log time axis.
    """
    series = latency_series(records, summary)
    if not series:
        raise PlotError("no latency to draw: no completed request in the records and no "
                        "latency keys in the report")
    figure, axes = new_figure(2, 2, width=10.0, height=7.5)
    for ax, (name, title, _, _) in zip(axes, LATENCIES):
        data = series.get(name)
        ax.set_title(title)
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of requests" if name != "itl" else "fraction of gaps")
        ax.grid(True, alpha=0.3)
        if data is None:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
            continue
        if data["source"] == FROM_RECORDS:
            ax.step(data["x"], data["y"], where="post", label=f"{len(data['x'])} requests")
        else:
            ax.plot(data["x"], data["y"], marker="o", label="report percentiles")
        ax.set_ylim(0, 1.02)
        scale_latency_axis(ax, [data["x"]])
        ax.legend(fontsize="small", loc="lower right")
    written = save_png(figure, path)
    return Plot(written, series)


def timeline_sample(records: Iterable[Mapping[str, Any]], sample: int) -> dict[str, list]:
    """At most ``sample`` records spread evenly over the run's records (in arrival order): each
    one's ``uuid``, ``arrival`` (ms), ``first_token`` (ms or None), ``finish`` (the terminal
    time, ms) and ``status``."""
    rows = [(number(r.get("arrival_time_ms")), number(r.get("first_token_ms")),
             number(r.get("terminal_time_ms")), r.get("uuid"), r.get("terminal_status"))
            for r in records]
    rows = [row for row in rows if row[0] is not None]
    rows.sort(key=lambda row: row[0])
    if sample < len(rows):
        step = len(rows) / sample
        rows = [rows[int(i * step)] for i in range(sample)]
    return {"uuid": [r[3] for r in rows], "arrival": [r[0] for r in rows],
            "first_token": [r[1] for r in rows],
            "finish": [r[2] if r[2] is not None else r[0] for r in rows],
            "status": [r[4] for r in rows]}


def plot_request_timeline(records: Iterable[Mapping[str, Any]], path: str | os.PathLike,
                          sample: int = 40) -> Plot:
    """One bar per request for a sample of ``sample`` requests spread over the run: waiting
    from arrival to its first token, generating from the first token to its finish (the
    terminal time); a request without tokens (rejected) is a grey bar. PNG at ``path``.

    ``series``: ``timeline_sample(records, sample)``.
    """
    if sample < 1:
        raise PlotError(f"the timeline's sample must be >= 1, got {sample}")
    series = timeline_sample(records, sample)
    if not series["uuid"]:
        raise PlotError("no request to draw: the records are empty")
    figure, (ax,) = new_figure(width=10.0, height=max(4.0, 1.5 + 0.18 * len(series["uuid"])))
    for row, (arrival, first, finish) in enumerate(zip(series["arrival"], series["first_token"],
                                                       series["finish"])):
        if first is None:
            ax.barh(row, finish - arrival, left=arrival, color="tab:gray", height=0.7)
            continue
        ax.barh(row, first - arrival, left=arrival, color="tab:orange", height=0.7)
        ax.barh(row, finish - first, left=first, color="tab:blue", height=0.7)
        ax.plot([first], [row], marker="|", color="black", markersize=8)
    from matplotlib.patches import Patch

    handles = [Patch(color="tab:orange", label="arrival → first token"),
               Patch(color="tab:blue", label="first token → finish")]
    if any(first is None for first in series["first_token"]):
        handles.append(Patch(color="tab:gray", label="no token (rejected)"))
    ax.legend(handles=handles, fontsize="small", loc="upper right")
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (ms)")
    ax.set_ylabel("request (in arrival order)")
    ax.set_title(f"{len(series['uuid'])} requests: arrival, first token, finish")
    ax.grid(True, axis="x", alpha=0.3)
    written = save_png(figure, path)
    return Plot(written, series)


def _pools(samples: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(label, telemetry key stem) of each pool the samples show: ``agg`` alone for an
    aggregated run (whose ranks are reported as decode), else prefill and decode."""
    disaggregated = any(s.get("prefill_scheduler_metrics") or s.get("active_prefill_ids")
                        or s.get("starting_prefill_ids") for s in samples)
    return [("prefill", "prefill"), ("decode", "decode")] if disaggregated else [("agg", "decode")]


def telemetry_series(samples: Sequence[Mapping[str, Any]],
                     operations: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """What ``plot_telemetry`` draws, per sample time ``t_ms`` (``sampled_at_ms``):

    * ``queues``: per pool, ``"{pool} waiting"`` (engine queues: the ranks'
      ``waiting_requests`` summed), ``"{pool} running"``, ``"{pool} router pending"``
      (``router_pending_*_requests``);
    * ``kv_usage``: ``"{pool} mean"`` and ``"{pool} max"`` of the ranks' ``active_cache_usage``
      (None where the pool has no rank);
    * ``workers``: ``"{pool} active"``, ``"{pool} starting"``, ``"{pool} draining"`` (ids counted);
    * ``operations``: each lifecycle operation's ``at_ms``, ``pool``, ``cause`` and its
      transitions' names.
    """
    pools = _pools(samples)
    queues: dict[str, list] = {}
    kv: dict[str, list] = {}
    workers: dict[str, list] = {}
    for label, stem in pools:
        for name in ("waiting", "running", "router pending"):
            queues[f"{label} {name}"] = []
        kv[f"{label} mean"], kv[f"{label} max"] = [], []
        for name in ("active", "starting", "draining"):
            workers[f"{label} {name}"] = []
    times = []
    for sample in samples:
        times.append(float(sample.get("sampled_at_ms", 0.0)))
        for label, stem in pools:
            ranks = sample.get(f"{stem}_scheduler_metrics") or []
            queues[f"{label} waiting"].append(sum(r.get("waiting_requests", 0) for r in ranks))
            queues[f"{label} running"].append(sum(r.get("running_requests", 0) for r in ranks))
            queues[f"{label} router pending"].append(
                sample.get(f"router_pending_{stem}_requests", 0))
            usage = [float(r.get("active_cache_usage", 0.0)) for r in ranks]
            kv[f"{label} mean"].append(sum(usage) / len(usage) if usage else None)
            kv[f"{label} max"].append(max(usage) if usage else None)
            for name in ("active", "starting", "draining"):
                workers[f"{label} {name}"].append(len(sample.get(f"{name}_{stem}_ids") or ()))
    marks = [{"at_ms": float(op.get("at_ms", 0.0)), "pool": op.get("pool"),
              "cause": op.get("cause"),
              "transitions": [t.get("transition") for t in op.get("transitions", ())]}
             for op in operations or ()]
    return {"t_ms": times, "queues": queues, "kv_usage": kv, "workers": workers,
            "operations": marks}


def _operation_colour(mark: Mapping[str, Any]) -> str:
    kinds = set(mark["transitions"])
    if "worker_starting" in kinds:
        return "tab:green"
    if "worker_draining" in kinds:
        return "tab:red"
    return "tab:gray"


def plot_telemetry(samples: Sequence[Mapping[str, Any]],
                   operations: Sequence[Mapping[str, Any]] | None,
                   path: str | os.PathLike) -> Plot:
    """Queue lengths, KV usage and workers over simulated time in three panels sharing the
    time axis, with each scaling operation (the report's ``lifecycle_operations``) a vertical
    line on every panel: green where workers start, red where they drain, grey for the rest
    (ready, removed, cancelled). PNG at ``path``; ``series``: ``telemetry_series``.
    """
    if not samples:
        raise PlotError("no telemetry sample to draw")
    series = telemetry_series(samples, operations)
    seconds = [t / 1000.0 for t in series["t_ms"]]
    figure, axes = new_figure(3, 1, width=10.0, height=9.0, sharex=True)
    panels = ((axes[0], series["queues"], "requests", "queue lengths", False),
              (axes[1], series["kv_usage"], "active KV usage", "KV usage", False),
              (axes[2], series["workers"], "workers", "workers", True))
    for ax, lines, ylabel, title, steps in panels:
        for name, values in lines.items():
            if not any(v for v in values if v is not None) and not name.endswith(
                    ("waiting", "mean", "active")):
                continue  # an all-zero secondary line (no router queue, no draining) is noise
            points = [(t, v) for t, v in zip(seconds, values) if v is not None]
            if not points:
                continue
            style = {"drawstyle": "steps-post"} if steps else {"marker": "." if len(points) < 60 else None}
            ax.plot([t for t, _ in points], [v for _, v in points], label=name, **style)
        for mark in series["operations"]:
            ax.axvline(mark["at_ms"] / 1000.0, color=_operation_colour(mark), alpha=0.7,
                       linestyle=":", linewidth=1.5)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small", loc="upper right")
    if series["operations"]:
        from matplotlib.lines import Line2D

        colours = {_operation_colour(mark) for mark in series["operations"]}
        kinds = [(c, name) for c, name in (("tab:green", "workers start"),
                                            ("tab:red", "workers drain"),
                                            ("tab:gray", "ready / removed")) if c in colours]
        figure.legend(handles=[Line2D([], [], color=c, linestyle=":", linewidth=1.5, label=name)
                               for c, name in kinds],
                      fontsize="small", loc="outside lower center", ncols=len(kinds),
                      title="scaling operations (the report's lifecycle_operations)",
                      title_fontsize="small")
    axes[1].set_ylim(0, 1.05)
    axes[2].yaxis.get_major_locator().set_params(integer=True)
    axes[2].set_xlabel("simulated time (s)" + (f"; dotted lines: the {len(series['operations'])} "
                                               "scaling operations" if series["operations"] else ""))
    written = save_png(figure, path)
    return Plot(written, series)

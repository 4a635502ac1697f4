"""``aisimulate sweep SWEEP.json``: run a sweep, show its progress and its table."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, TextIO

from aisimulate_core.cli.outputs import CliError, write_stdout
from aisimulate_core.cli.summary import PROG, align
from aisimulate_core.messages import escape_controls

MAX_TABLE_ROWS = 60
PROGRESS_INTERVAL_S = 0.2


def add_sweep_parser(commands, add_common) -> argparse.ArgumentParser:
    sweep = commands.add_parser(
        "sweep", help="run a payload over axes of overrides and search for the best deployment")
    sweep.add_argument("sweep", metavar="SWEEP", help="sweep file (JSON, or YAML with PyYAML)")
    sweep.add_argument("--out", metavar="DIR",
                       help="output directory (default: the file's 'output', else SWEEP.results "
                            "beside the file); its ledger.jsonl is reused by a rerun")
    sweep.add_argument("--jobs", "-j", metavar="N",
                       help="points run at once (default: the CPU count; with Ray, the "
                            "cluster's CPUs)")
    sweep.add_argument("--executor", choices=("local", "ray"), default="local",
                       help="local processes (default) or Ray tasks (the 'sweep' extra)")
    sweep.add_argument("--address", metavar="ADDR",
                       help="the Ray cluster to join (default: start a local one)")
    sweep.add_argument("--retry-failed", action="store_true",
                       help="run again the points the ledger records as failed")
    sweep.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    sweep.add_argument(
        "--set", action="append", default=[], metavar="PATH=VALUE",
        help="override a field of every point's payload, after the file's 'set' (repeatable)")
    shown = sweep.add_mutually_exclusive_group()
    shown.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    shown.add_argument("--progress", action="store_true",
                       help="show the progress line even when stderr is not a terminal")
    add_common(sweep)
    return sweep


def _jobs(args: argparse.Namespace) -> int | None:
    if args.jobs is None:
        return None
    try:
        jobs = int(args.jobs)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise CliError(f"--jobs: must be a positive integer, got {escape_controls(args.jobs)!r}")
    return jobs


class SweepProgress:
    """``aisimulate: sweep 12/32 points (1 failed, 3 from the ledger), ETA 0:41`` on stderr,
    rewritten in place on a terminal, one line per update otherwise (at most 5 a second)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._last = float("-inf")
        self._shown = False

    def __call__(self, progress) -> None:
        now = time.monotonic()
        finished = progress.expected and progress.done >= progress.expected
        if now - self._last < PROGRESS_INTERVAL_S and not finished:
            return
        self._last = now
        run = progress.done - progress.reused
        eta = ""
        if run > 0 and progress.expected > progress.done:
            left = (now - progress.started) / run * (progress.expected - progress.done)
            eta = f", ETA {int(left // 60)}:{int(left % 60):02d}"
        total = f"/{progress.expected}" if progress.expected else ""
        extra = [f"{progress.failed} failed"] if progress.failed else []
        if progress.reused:
            extra.append(f"{progress.reused} from the ledger")
        text = f"{PROG}: sweep {progress.done}{total} points" + \
            (f" ({', '.join(extra)})" if extra else "") + eta
        try:
            if self._tty:
                self._stream.write(f"\r\x1b[K{text}")
            else:
                self._stream.write(text + "\n")
            self._stream.flush()
        except OSError:
            return
        self._shown = True

    def close(self) -> None:
        if self._shown and self._tty:
            try:
                self._stream.write("\r\x1b[K")
                self._stream.flush()
            except OSError:
                pass


def sweep_command(args: argparse.Namespace, pm) -> int:
    import attrs

    from aisimulate_core.overrides import parse_overrides
    from aisimulate_core.sweep import default_jobs, load_sweep, run_sweep
    from aisimulate_core.sweep.executors import LocalExecutor, RayExecutor
    from aisimulate_core.sweep.point import use_plugin_manager

    jobs = _jobs(args)
    if args.address and args.executor != "ray":
        raise CliError("--address: needs --executor ray")
    extra = parse_overrides(args.set)
    spec = load_sweep(args.sweep, output=args.out)
    if extra:
        spec = attrs.evolve(spec, fixed=(*spec.fixed, *extra))
    _check_goal_needs_sla(spec)
    from aisimulate_core.cli.main import plugins_from_env

    # what a Ray worker needs to load the same plugins as this command
    plugin_options = (not args.disable_plugin_autoload,
                      (*plugins_from_env(os.environ), *args.plugin))
    use_plugin_manager(plugin_options, pm)  # local points (and forked workers) share it
    if args.executor == "ray":
        from aisimulate_core.sweep.point import TraceDigests

        executor = RayExecutor(args.address, plugin_options, TraceDigests())
        if jobs is None:
            import ray

            jobs = max(1, int(ray.cluster_resources().get("CPU", 1)))
    else:
        jobs = jobs or default_jobs()
        executor = LocalExecutor(jobs, plugin_options)
    progress = None
    if args.progress or (not args.quiet and sys.stderr.isatty()):
        progress = SweepProgress(sys.stderr)
    warnings = []
    try:
        result = run_sweep(spec, executor, jobs=jobs, retry_failed=args.retry_failed,
                           on_progress=progress, plots=not args.no_plots,
                           on_warning=warnings.append)
    finally:
        if progress is not None:
            progress.close()
        executor.close()
    for line in warnings:
        print(f"{PROG}: warning: {line}", file=sys.stderr)
    write_stdout(format_result(result))
    return 0


def _check_goal_needs_sla(spec) -> None:
    """A goal on the share of requests within SLA needs the payload's SLA."""
    from aisimulate_core.sweep.point import point_document

    goal = spec.goal
    reads_goodput = goal.kind == "max_goodput" and (goal.metric or "goodput").startswith("goodput")
    if goal.min_good_fraction is None and not reads_goodput:
        return
    first = point_document(spec.base, spec.fixed, spec.axes, tuple(0 for _ in spec.axes))
    root = first.get("spec", {}) if "spec" in first or "traffic" in first else first
    sla = root.get("sla") if type(root) is dict else None
    if not (type(sla) is dict and any(sla.get(k) is not None for k in ("ttft_ms", "itl_ms", "e2e_ms"))):
        raise CliError(f"{escape_controls(str(spec.path))}: $.goal: {spec.goal.kind} reads the "
                       "requests within the SLA, but the payload sets no spec.sla (set it in the "
                       "payload or in the sweep's 'set', e.g. \"spec.sla.ttft_ms\": 2000)")


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return escape_controls(str(value))


def _blocks(blocks: Any) -> str:
    """KV blocks of one rank: ``15,616``, or prefill+decode ``15,616+46,971``."""
    if not isinstance(blocks, dict) or not blocks:
        return "-"
    return "+".join(_fmt(blocks[role]) for role in ("aggregated", "prefill", "decode") if role in blocks)


def format_result(result) -> str:
    """The points as a table (grid order), the chosen point and the files written."""
    from aisimulate_core.sweep.goals import goal_metric, value

    spec, rows = result.spec, result.rows
    goal = spec.goal
    metric = goal_metric(goal)
    extra = list(goal.metrics) if goal.kind == "pareto" else \
        ([metric] if metric and metric != "gpus" else [])
    shapes = any(axis.is_deployment for axis in spec.axes)
    header = ["point", *(_short(a.name) for a in spec.axes), "GPUs",
              *(["KV blocks/rank"] if shapes else []), "within SLA",
              *(_short(m) for m in extra), "p90 TTFT ms", "p90 ITL ms", "status"]
    table = [header]
    front = {row["point"] for row in result.front}
    chosen = result.chosen["point"] if result.chosen else None
    for row in rows[:MAX_TABLE_ROWS]:
        summary = row.get("summary") or {}
        fraction = row.get("good_fraction")
        mark = " *" if row["point"] == chosen else (" F" if row["point"] in front else "")
        status = row["status"] if row["status"] == "ok" else f"failed: {row.get('error') or ''}"
        if len(status) > 70:
            status = status[:67] + "..."
        table.append([f"{row['point']}{mark}", *(_fmt(row["overrides"].get(a.name)) for a in spec.axes),
                      _fmt(row.get("gpus")), *([_blocks(row.get("kv_blocks"))] if shapes else []),
                      "-" if fraction is None else f"{fraction * 100:.2f} %",
                      *(_fmt(value(row, m)) for m in extra),
                      _fmt(summary.get("p90_ttft_ms"), 1), _fmt(summary.get("p90_itl_ms"), 2),
                      status])
    lines = align(table)
    if len(rows) > MAX_TABLE_ROWS:
        lines.append(f"... {len(rows) - MAX_TABLE_ROWS} more points in results.csv")
    lines.append("")
    failed = sum(row["status"] != "ok" for row in rows)
    lines.append(f"{len(rows)} points ({failed} failed, {result.reused} from the ledger) in "
                 f"{result.wall_time_s:.1f} s; search {spec.search.policy}, goal {goal.kind}"
                 + (f" with >= {goal.min_good_fraction * 100:g} % of requests within SLA"
                    if goal.min_good_fraction is not None else ""))
    if result.chosen is None:
        lines.append("chosen: none (no point meets the goal)")
    else:
        row = result.chosen
        shown = ", ".join(f"{_short(k)}={_fmt(v)}" for k, v in row["overrides"].items())
        fraction = row.get("good_fraction")
        lines.append(f"chosen: point {row['point']} ({shown}): {_fmt(row.get('gpus'))} GPUs"
                     + ("" if fraction is None else f", {fraction * 100:.2f} % within SLA")
                     + "".join(f", {_short(m)} {_fmt(value(row, m))}" for m in extra))
    if goal.kind == "pareto":
        lines.append(f"pareto front: points {', '.join(str(r['point']) for r in result.front) or 'none'}")
    if "bisect" in result.details:
        for found in result.details["bisect"]["minima"]:
            others = ", ".join(f"{_short(k)}={_fmt(v)}" for k, v in found["others"].items())
            lines.append(f"bisect: smallest feasible {_short(result.details['bisect']['axis'])}"
                         f"{' for ' + others if others else ''}: "
                         f"{'none' if found['minimum'] is None else _fmt(found['minimum'])}")
    lines.append("wrote " + ", ".join(escape_controls(str(p)) for p in result.files.values()))
    return "\n".join(lines) + "\n"

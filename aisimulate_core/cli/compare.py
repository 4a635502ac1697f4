"""``aisimulate compare A.json B.json ...``: reports side by side, each against the first.

Rows are summary keys: by default the headline ones (``format_summary``'s: latencies, counts,
throughput, reuse, GPU-hours, goodput), every numeric key with ``--all``; a key no report has is
left out. Each later report gets a relative-difference column, ``(value - first) / |first|``:
0 when both are 0, none when the first is 0 and the other is not, or either is missing.
``--format table`` (default) prints an aligned table, ``csv`` and ``json`` the same rows for
programs. ``--plot`` draws the runs' latency CDFs overlaid (``compare.latency_cdf.png`` in
``--out``), from ``--per-request`` files (one per report, in the same order) or the records kept
in the reports, else from the reports' percentiles.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from aisimulate_core.cli.outputs import CliError, write_stdout
from aisimulate_core.cli.plot import output_directory, read_report, records_of
from aisimulate_core.cli.summary import LATENCY_COLUMNS, LATENCY_ROWS, align
from aisimulate_core.messages import escape_controls
from aisimulate_core.viz.figure import number

HEADLINE_KEYS = (
    "num_requests", "completed_requests", "duration_ms", "request_throughput_rps",
    "output_throughput_tok_s",
    *(f"{stat}_{name}_ms" for _, name in LATENCY_ROWS for _, stat in LATENCY_COLUMNS),
    "prefix_cache_reused_ratio", "gpu_hours", "goodput_completed_requests",
    "goodput_request_throughput_rps", "goodput_output_throughput_tok_s",
)
FORMATS = ("table", "csv", "json")


def add_compare_parser(commands) -> argparse.ArgumentParser:
    compare = commands.add_parser("compare", help="reports side by side with relative "
                                                  "differences; --plot overlays their CDFs")
    compare.add_argument("reports", metavar="REPORT.json", nargs="+",
                         help="reports written by run --output; the first is the baseline")
    compare.add_argument("--all", action="store_true",
                         help="every numeric summary key, not only the headline ones")
    compare.add_argument("--format", choices=FORMATS, default="table",
                         help="table (default), csv or json")
    compare.add_argument("--plot", action="store_true",
                         help="also draw the latency CDFs overlaid (needs matplotlib)")
    compare.add_argument("--per-request", metavar="RECORDS", nargs="+", default=None,
                         help="with --plot: each report's records, in the reports' order")
    compare.add_argument("--out", metavar="DIR", help="directory for --plot (default: .)")
    return compare


def relative(value: Any, base: Any) -> float | None:
    """``(value - base) / |base|``; 0.0 when both are 0; None when it has no meaning."""
    value, base = number(value), number(base)
    if value is None or base is None:
        return None
    if base == 0:
        return 0.0 if value == 0 else None
    return (value - base) / abs(base)


def compare_rows(summaries: Sequence[dict[str, Any]], every_key: bool = False) -> list[dict]:
    """One row per key: ``{"key", "values": [per report, None where missing], "relative":
    [None for the first, then relative(value, first)]}``."""
    if every_key:
        keys: list[str] = []
        for summary in summaries:
            keys.extend(k for k, v in summary.items() if number(v) is not None and k not in keys)
    else:
        keys = [k for k in HEADLINE_KEYS if any(k in summary for summary in summaries)]
    rows = []
    for key in keys:
        values = [summary.get(key) for summary in summaries]
        values = [v if number(v) is not None else None for v in values]
        rows.append({"key": key, "values": values,
                     "relative": [None, *(relative(v, values[0]) for v in values[1:])]})
    return rows


def labels_of(paths: Sequence[str]) -> list[str]:
    """Each report's name in the table: its file name without ``.json``, or the path given
    where two reports share a name."""
    stems = [Path(p).stem for p in paths]
    return [stem if stems.count(stem) == 1 else str(p) for stem, p in zip(stems, paths)]


def _value_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1e5:  # durations in ms: every digit, not an exponent
        return f"{value:,.0f}"
    return f"{value:,.6g}"


def _relative_text(rel: float | None) -> str:
    return "n/a" if rel is None else f"{rel * 100:+.2f}%"


def format_table(labels: Sequence[str], rows: Sequence[dict]) -> str:
    header = ["", labels[0]]
    for label in labels[1:]:
        header += [label, f"vs {labels[0]}"]
    table = [header]
    for row in rows:
        cells = [row["key"], _value_text(row["values"][0])]
        for value, rel in zip(row["values"][1:], row["relative"][1:]):
            cells += [_value_text(value), _relative_text(rel) if value is not None else "-"]
        table.append(cells)
    return "\n".join(align(table, right_from=1)) + "\n"


def format_csv(labels: Sequence[str], rows: Sequence[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["key", *labels, *(f"{label} relative" for label in labels[1:])])
    for row in rows:
        writer.writerow([row["key"], *("" if v is None else v for v in row["values"]),
                         *("" if r is None else r for r in row["relative"][1:])])
    return out.getvalue()


def format_json(labels: Sequence[str], paths: Sequence[str], rows: Sequence[dict]) -> str:
    document = {
        "baseline": labels[0],
        "runs": [{"label": label, "path": str(path)} for label, path in zip(labels, paths)],
        "rows": [{"key": row["key"], "values": dict(zip(labels, row["values"])),
                  "relative": dict(zip(labels[1:], row["relative"][1:]))} for row in rows],
    }
    return json.dumps(document, indent=1) + "\n"


def compare_command(args: argparse.Namespace) -> int:
    if len(args.reports) < 2:
        raise CliError("compare: needs at least two reports, got 1")
    if args.per_request is not None and not args.plot:
        raise CliError("--per-request: only used with --plot")
    if args.per_request is not None and len(args.per_request) != len(args.reports):
        raise CliError(f"--per-request: one records file per report, got "
                       f"{len(args.per_request)} for {len(args.reports)} reports")
    if args.plot:
        from aisimulate_core.viz.figure import new_figure

        new_figure()  # matplotlib missing: one line before anything is read
    reports = [read_report(path) for path in args.reports]
    labels = labels_of(args.reports)
    rows = compare_rows(reports, every_key=args.all)
    if args.format == "csv":
        text = format_csv(labels, rows)
    elif args.format == "json":
        text = format_json(labels, args.reports, rows)
    else:
        text = format_table(labels, rows)
    plot = None
    if args.plot:
        from aisimulate_core.viz.compare import plot_cdf_overlay

        given = args.per_request or [None] * len(reports)
        runs = [(label, records_of(report, records), report)
                for label, report, records in zip(labels, reports, given)]
        directory = output_directory(args.out, Path("."))
        plot = plot_cdf_overlay(runs, directory / "compare.latency_cdf.png")
        missing = [label for label, records, _ in runs if not records]
        if missing:
            print(f"aisimulate: compare: no per-request records for "
                  f"{', '.join(escape_controls(m) for m in missing)}: their CDFs are the "
                  "reports' percentiles (give --per-request)", file=sys.stderr)
    write_stdout(text)
    if plot is not None:
        print(f"wrote {escape_controls(plot.path)}", file=sys.stderr)
    return 0

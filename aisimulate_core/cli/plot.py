"""``aisimulate plot REPORT.json [--per-request RECORDS] [--telemetry SAMPLES] [--out DIR]``:
the run's pictures as PNG files (matplotlib, the ``plot`` extra).

Written into DIR (default: the report's directory), named after the report (``r.json`` ->
``r.latency_cdf.png``, ``r.timeline.png``, ``r.telemetry.png``):

* latency CDFs, always: from the records (``--per-request``, or the report's own
  ``per_request`` list), else from the report's percentiles;
* the per-request timeline, when there are records;
* the telemetry panels, when there are samples (``--telemetry``), with the report's
  ``lifecycle_operations`` marked.

One line per file written goes to standard output; a picture without its input is named on
standard error with what to give.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from aisimulate_core.cli.outputs import CliError, write_stdout
from aisimulate_core.messages import escape_controls

TIMELINE_SAMPLE = 40


def add_plot_parser(commands) -> argparse.ArgumentParser:
    plot = commands.add_parser("plot", help="draw a run's latency CDFs, request timeline and "
                                            "telemetry as PNG files (needs matplotlib)")
    plot.add_argument("report", metavar="REPORT.json", help="a report written by run --output")
    plot.add_argument("--per-request", metavar="RECORDS",
                      help="the run's records (.jsonl, .csv or .parquet)")
    plot.add_argument("--telemetry", metavar="SAMPLES.jsonl", help="the run's telemetry samples")
    plot.add_argument("--out", metavar="DIR",
                      help="directory for the PNG files (default: the report's directory)")
    plot.add_argument("--sample", metavar="N", type=_positive_int, default=TIMELINE_SAMPLE,
                      help=f"requests shown on the timeline (default {TIMELINE_SAMPLE})")
    return plot


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def read_report(path: str | Path) -> dict[str, Any]:
    """A report JSON file as ``run --output`` writes it (summary keys, optionally
    ``per_request``); one-line CliError otherwise."""
    from aisimulate_core.cli.record_formats import file_errors

    path = Path(path)
    shown = escape_controls(str(path))
    with file_errors(shown, "report"):
        text = path.read_text(encoding="utf-8")
    try:
        report = json.loads(text)
    except ValueError as error:
        raise CliError(f"{shown}: not valid JSON: {error}") from None
    if isinstance(report, dict) and "num_requests" not in report \
            and isinstance(report.get("summary"), dict):
        report = {**report["summary"], "per_request": report.get("per_request")}
    if not isinstance(report, dict) or "num_requests" not in report:
        raise CliError(f"{shown}: not an aisimulate report (a JSON object with the summary "
                       "keys, as run --output writes)")
    return report


def output_directory(given: str | None, report_path: Path) -> Path:
    directory = Path(given) if given else (report_path.parent if str(report_path.parent) else Path("."))
    shown = escape_controls(str(directory))
    if directory.exists() and not directory.is_dir():
        raise CliError(f"--out {shown}: not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CliError(f"--out {shown}: cannot create it: {error.strerror or error}") from None
    return directory


def records_of(report: dict[str, Any], given: str | None) -> list[dict] | None:
    """The records to draw (the keys the plots read): the file given, else the report's own
    ``per_request``."""
    from aisimulate_core.cli.record_formats import read_records
    from aisimulate_core.viz.runs import RECORD_KEYS

    if given:
        return list(read_records(given, keys=RECORD_KEYS))
    kept = report.get("per_request")
    return kept if isinstance(kept, list) else None


def plot_command(args: argparse.Namespace) -> int:
    from aisimulate_core.cli.record_formats import read_json_lines
    from aisimulate_core.viz.figure import new_figure
    from aisimulate_core.viz.runs import plot_latency_cdfs, plot_request_timeline, plot_telemetry

    report_path = Path(args.report)
    report = read_report(report_path)
    new_figure()  # matplotlib missing: one line now, before any input is read
    records = records_of(report, args.per_request)
    samples = list(read_json_lines(args.telemetry)) if args.telemetry else None
    directory = output_directory(args.out, report_path)
    stem = report_path.stem
    written = [plot_latency_cdfs(records, report, directory / f"{stem}.latency_cdf.png")]
    notes = []
    if records:
        written.append(plot_request_timeline(records, directory / f"{stem}.timeline.png",
                                             sample=args.sample))
    else:
        notes.append("timeline: not drawn, no per-request records (give --per-request "
                     "RECORDS; CDFs drawn from the report's percentiles)")
    if samples:
        written.append(plot_telemetry(samples, report.get("lifecycle_operations"),
                                      directory / f"{stem}.telemetry.png"))
    else:
        notes.append("telemetry: not drawn, no samples (give --telemetry SAMPLES.jsonl, "
                     "written by run --telemetry)")
    write_stdout("".join(f"wrote {escape_controls(plot.path)}\n" for plot in written))
    for note in notes:
        print(f"aisimulate: {note}", file=sys.stderr)
    return 0

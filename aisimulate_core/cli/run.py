"""``aisimulate run PAYLOAD``: check the outputs, replay, write them, print the summary."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from aisimulate_core.cli.outputs import (CliError, RunOutputs, check_targets, resolve_target,
                                         write_stdout, writes_stdout)
from aisimulate_core.cli.summary import ProgressLine, format_summary
from aisimulate_core.messages import escape_controls
from aisimulate_core.plugins import AisimPluginManager


def run_command(args: argparse.Namespace, pm: AisimPluginManager) -> int:
    from aisimulate_core.api import run_replay
    from aisimulate_core.overrides import load_with_overrides, naming_overrides, parse_overrides

    payload_path = Path(args.payload)
    overrides = parse_overrides(getattr(args, "set", None))
    payload = load_with_overrides(read_payload(payload_path), overrides)
    report_target = resolve_target("--output", args.output) if args.output else None
    records_target = resolve_target("--per-request", args.per_request) if args.per_request else None
    samples_target = resolve_target("--telemetry", args.telemetry) if args.telemetry else None
    interval = telemetry_interval(args)
    targets = [t for t in (report_target, records_target, samples_target) if t is not None]
    check_targets(targets, inputs_of(payload_path, payload))
    if records_target is not None and not payload.spec.record_per_request:
        raise CliError("--per-request: the report has no per-request records "
                       "($.spec.record_per_request is false)")

    progress = None
    if not args.quiet and sys.stderr.isatty():
        progress = ProgressLine(sys.stderr)
    with RunOutputs(report_target, records_target, samples_target) as outputs, \
            naming_overrides(overrides):
        try:
            # records and samples go to their (temporary) files as they come: memory stays flat
            report = run_replay(payload, plugin_manager=pm, progress=progress,
                                on_record=outputs.record_writer,
                                telemetry_interval_ms=interval if samples_target else None,
                                on_sample=outputs.sample_writer)
        finally:
            if progress is not None:
                progress.close()
        outputs.finish(report.to_json() if report_target is not None else None)
    if not any(writes_stdout(target) for target in targets):  # else stdout carries the data
        write_stdout(format_summary(report.summary))
    return 0


def telemetry_interval(args: argparse.Namespace) -> float:
    """``--telemetry-interval-ms``: a finite number of milliseconds >= 0.001 (default 1000)."""
    from aisimulate_core.runtime.telemetry import MIN_INTERVAL_MS

    given = args.telemetry_interval_ms
    if given is None:
        return 1000.0
    if not args.telemetry:
        raise CliError("--telemetry-interval-ms: needs --telemetry SAMPLES.jsonl")
    try:
        value = float(given)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= MIN_INTERVAL_MS):
        raise CliError(f"--telemetry-interval-ms: must be a finite number of ms >= "
                       f"{MIN_INTERVAL_MS:g}, got {escape_controls(given)!r}")
    return value


def inputs_of(payload_path: Path, payload) -> list[tuple[str, Path]]:
    """The files the run reads, described for messages: the payload and its trace files."""
    inputs = [("the payload", payload_path)]
    paths = getattr(payload.traffic, "paths", ()) if payload.traffic is not None else ()
    inputs.extend((f"the trace file {escape_controls(str(path))}", Path(path)) for path in paths)
    return inputs


def read_payload(path: Path) -> str:
    shown = escape_controls(str(path))
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"cannot read payload {shown}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"cannot read payload {shown}: is a directory") from None
    except OSError as error:
        raise CliError(f"cannot read payload {shown}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise CliError(f"{shown}: not valid JSON: not UTF-8 text ({error.reason})") from None


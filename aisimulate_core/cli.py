"""The ``aisimulate`` command: ``aisimulate run PAYLOAD`` and ``aisimulate plugins``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TextIO

from aisimulate_core.errors import AisimError
from aisimulate_core.plugins import AisimPluginManager, make_plugin_manager

PROG = "aisimulate"
PLUGINS_ENV = "AISIMULATE_PLUGINS"
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
LATENCY_ROWS = (("TTFT", "ttft"), ("TTST", "ttst"), ("ITL", "itl"), ("TPOT", "tpot"), ("E2E latency", "e2e_latency"))
LATENCY_COLUMNS = (("avg", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99"))
PROGRESS_INTERVAL_S = 0.1


class CliError(AisimError):
    """A command-line level failure (unreadable payload, unwritable output)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``aisimulate`` command; returns the exit status (2 on any user error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except AisimError as error:
        print_error(str(error))
        return EXIT_ERROR
    except SystemExit as stop:  # argparse: --help, usage errors
        return stop.code if isinstance(stop.code, int) else EXIT_ERROR


def print_error(message: str, stream: TextIO | None = None) -> None:
    stream = stream or sys.stderr
    for line in message.splitlines() or [""]:
        print(f"{PROG}: error: {line}", file=stream)


def _main(argv: list[str]) -> int:
    plugin_args, _ = _plugin_options_parser().parse_known_args(argv)
    pm = make_plugin_manager(
        autoload=not plugin_args.disable_plugin_autoload,
        plugins=[*plugins_from_env(os.environ), *plugin_args.plugin],
    )
    parser, run_parser = _build_parser()
    pm.hook.aisimulate_add_cli_options(parser=run_parser)
    args = parser.parse_args(argv)
    if args.command == "plugins":
        print_plugins(pm, sys.stdout)
        return 0
    for failure in pm.load_failures:
        print(f"{PROG}: warning: {failure.message()}", file=sys.stderr)
    return run_command(args, pm)


def plugins_from_env(environ: Mapping[str, str]) -> list[str]:
    """Module names listed (comma-separated) in AISIMULATE_PLUGINS, like pytest's PYTEST_PLUGINS."""
    return [name.strip() for name in environ.get(PLUGINS_ENV, "").split(",") if name.strip()]


def _add_plugin_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE_OR_NAME",
        help="load a plugin module or entry point (repeatable); 'no:NAME' blocks plugin NAME",
    )
    parser.add_argument(
        "--disable-plugin-autoload",
        action="store_true",
        help="do not load plugins from installed distributions (entry-point group 'aisimulate')",
    )


def _plugin_options_parser() -> argparse.ArgumentParser:
    # Plugins must be loaded before the full parser exists: they may add options to `run`.
    parser = argparse.ArgumentParser(add_help=False)
    _add_plugin_options(parser)
    return parser


def _build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(
        prog=PROG, description="GPU-free simulator of LLM inference serving."
    )
    _add_plugin_options(parser)  # accepted before the command too; the pre-parse uses them
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="replay an execution payload and report its metrics")
    run.add_argument("payload", metavar="PAYLOAD", help="execution payload (JSON file)")
    run.add_argument("--output", metavar="REPORT.json", help="write the whole report as JSON")
    run.add_argument(
        "--per-request", metavar="FILE.jsonl", help="write one JSON object per request record"
    )
    run.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    _add_plugin_options(run)
    listing = commands.add_parser("plugins", help="list loaded plugins and their providers")
    _add_plugin_options(listing)
    return parser, run


def run_command(args: argparse.Namespace, pm: AisimPluginManager) -> int:
    payload_text = read_payload(Path(args.payload))
    outputs = [Path(path) for path in (args.output, args.per_request) if path]
    for path in outputs:
        if not path.parent.is_dir():
            raise CliError(f"cannot write {path}: directory {path.parent} does not exist")
    from aisimulate_core.api import run_replay

    progress = None
    if not args.quiet and sys.stderr.isatty():
        progress = ProgressLine(sys.stderr)
    import msgspec

    try:
        report = run_replay(payload_text, plugin_manager=pm, progress=progress)
    except (json.JSONDecodeError, msgspec.DecodeError) as error:
        raise CliError(f"{args.payload}: not valid JSON: {error}") from None
    finally:
        if progress is not None:
            progress.close()
    if args.per_request and report.per_request is None:
        raise CliError(
            "--per-request: the report has no per-request records "
            "($.spec.record_per_request is false)"
        )
    if args.output:
        write_atomic(Path(args.output), lambda out: out.write(report.to_json()))
    if args.per_request:
        write_atomic(Path(args.per_request), lambda out: write_jsonl(out, report.per_request))
    print(format_summary(report.summary), end="")
    return 0


def read_payload(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"cannot read payload {path}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"cannot read payload {path}: is a directory") from None
    except OSError as error:
        raise CliError(f"cannot read payload {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise CliError(f"{path}: not valid JSON: not UTF-8 text ({error.reason})") from None


class ProgressLine:
    """One status line on a terminal, rewritten in place as the simulation advances."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._last_s = float("-inf")
        self._shown = False

    def __call__(self, sim_time_ms: float, completed: int, total: int | None) -> None:
        now_s = time.monotonic()
        if now_s - self._last_s < PROGRESS_INTERVAL_S:
            return
        self._last_s = now_s
        of_total = f"/{total}" if total is not None else ""
        self._stream.write(
            f"\r\x1b[K{PROG}: simulated {sim_time_ms / 1000:,.1f} s, {completed}{of_total} requests done"
        )
        self._stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False


def write_atomic(path: Path, write: Callable[[TextIO], None]) -> None:
    """Write ``path`` through a temporary file in its directory, renamed only once complete."""
    try:
        handle = tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
        )
    except OSError as error:
        raise CliError(f"cannot write {path}: {error.strerror or error}") from None
    try:
        with handle:
            write(handle)
        os.chmod(handle.name, 0o666 & ~_umask())
        os.replace(handle.name, path)
    except BaseException as error:
        try:
            os.unlink(handle.name)
        except OSError:
            pass
        if isinstance(error, OSError):
            raise CliError(f"cannot write {path}: {error.strerror or error}") from None
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_jsonl(out: TextIO, records: Iterable[dict[str, Any]]) -> None:
    import msgspec

    encoder = msgspec.json.Encoder()
    for record in records:
        out.write(encoder.encode(record).decode("utf-8"))
        out.write("\n")


def format_summary(summary: dict[str, Any]) -> str:
    """The report summary as a readable table (latencies in ms, then counts and rates)."""
    rows = [["", *(label for label, _ in LATENCY_COLUMNS)]]
    for label, name in LATENCY_ROWS:
        rows.append(
            [f"{label} (ms)", *(_number(summary.get(f"{stat}_{name}_ms"), 2) for _, stat in LATENCY_COLUMNS)]
        )
    lines = _align(rows, right_from=1)
    lines.append("")
    facts = [
        ("requests completed", f"{_number(summary.get('completed_requests'), 0)} / {_number(summary.get('num_requests'), 0)}"),
        ("duration", f"{_number(_scaled(summary.get('duration_ms'), 1e-3), 3)} s"),
        (
            "throughput",
            f"{_number(summary.get('request_throughput_rps'), 3)} req/s, "
            f"{_number(summary.get('output_throughput_tok_s'), 1)} output tok/s",
        ),
        ("prefix cache reuse", f"{_number(_scaled(summary.get('prefix_cache_reused_ratio'), 100), 2)} %"),
        ("GPU-hours", _number(summary.get("gpu_hours"), 4)),
    ]
    if "goodput_request_throughput_rps" in summary:
        facts.append(
            (
                "goodput",
                f"{_number(summary.get('goodput_request_throughput_rps'), 3)} req/s, "
                f"{_number(summary.get('goodput_output_throughput_tok_s'), 1)} output tok/s "
                f"({_number(summary.get('goodput_completed_requests'), 0)} requests within SLA)",
            )
        )
    lines.extend(_align([list(fact) for fact in facts]))
    return "\n".join(lines) + "\n"


def _scaled(value: Any, factor: float) -> Any:
    return value * factor if isinstance(value, (int, float)) else value


def _number(value: Any, decimals: int) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return f"{value:,.{decimals}f}"


def _align(rows: list[list[str]], right_from: int | None = None) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if right_from is not None and i >= right_from else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def print_plugins(pm: AisimPluginManager, out: TextIO) -> None:
    """A table of loaded plugins: distribution, hooks implemented, providers per kind."""
    from aisimulate_core.registry import collect_registries

    registries = collect_registries(pm)
    provided: dict[str, list[str]] = {}
    for registry in registries.by_hook().values():
        by_plugin: dict[str, list[str]] = {}
        for provider in registry.providers():
            by_plugin.setdefault(provider.plugin or "", []).append(provider.name)
        for plugin_name, names in by_plugin.items():
            provided.setdefault(plugin_name, []).append(f"{registry.kind}: {', '.join(names)}")
    rows = [["plugin", "distribution", "hooks", "providers"]]
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            rows.append([name, "(blocked)", "", ""])
            continue
        hooks = sorted(caller.name for caller in pm.get_hookcallers(plugin) or ())
        providers = provided.get(name, [])
        for i in range(max(1, len(hooks), len(providers))):
            rows.append(
                [
                    name if i == 0 else "",
                    (pm.distribution_of(name) or "-") if i == 0 else "",
                    hooks[i] if i < len(hooks) else "",
                    providers[i] if i < len(providers) else "",
                ]
            )
    for line in _align(rows):
        print(line, file=out)
    if pm.load_failures:
        print("\nfailed to load:", file=out)
        for failure in pm.load_failures:
            print(f"  {failure.message()}", file=out)


if __name__ == "__main__":
    sys.exit(main())

"""The ``aisimulate`` command line: parsing, plugins, and the exit-code conventions.

Exit codes: 0 success; 2 a user error (an ``AisimError``: one ``aisimulate: error:`` line per
problem) or a command-line usage error; 70 an internal error (a bug: one line, ``--debug``
shows the traceback); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM); 141 standard output
closed early (a broken pipe, as a process killed by SIGPIPE would report).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import sys
import threading
import traceback
from typing import Iterator, Mapping, Sequence, TextIO

from aisimulate_core.cli.listing import print_plugins, print_version
from aisimulate_core.cli.outputs import StdoutError, write_stdout
from aisimulate_core.errors import AisimError
from aisimulate_core.messages import escape_controls, problem_lines
from aisimulate_core.plugins import AisimPluginManager, call_each_plugin, make_plugin_manager
from aisimulate_core.runtime.simulation import raise_gc_threshold, restore_gc_threshold

PROG = "aisimulate"
PLUGINS_ENV = "AISIMULATE_PLUGINS"
EXIT_ERROR = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE of sysexits.h
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 128 + 13
EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is so that cleanup (temporary files) runs as on Ctrl-C."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``aisimulate`` command; returns the exit status (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv[: argv.index("--")] if "--" in argv else "--debug" in argv
    # the whole command (plugin imports, the converter's generated code, the run) allocates
    # what it keeps: the collector's young generation waits longer between collections
    thresholds = raise_gc_threshold()
    try:
        return _main_guarded(argv, debug)
    finally:
        restore_gc_threshold(thresholds)


def _main_guarded(argv: list[str], debug: bool) -> int:
    with _sigterm_raises():
        try:
            status = _main(argv)
            _flush_stdout()
            return status
        except Terminated:
            return EXIT_TERMINATED
        except KeyboardInterrupt:
            _print_safely("", sys.stderr)
            return EXIT_INTERRUPTED
        except StdoutError as error:
            _quiet_stream(sys.stdout)  # the interpreter's own flush at exit must not fail again
            if error.broken_pipe:
                return EXIT_BROKEN_PIPE
            print_error(str(error))
            return EXIT_ERROR
        except AisimError as error:
            if debug:
                traceback.print_exc()
            print_error(str(error))
            return EXIT_ERROR
        except SystemExit as stop:  # argparse: --help, usage errors
            return stop.code if isinstance(stop.code, int) else EXIT_ERROR
        except Exception as error:  # a bug: one line, or the traceback on request
            if debug:
                traceback.print_exc()
            else:
                print_internal_error(error)
            return EXIT_INTERNAL


def print_error(message: str, stream: TextIO | None = None) -> None:
    """``aisimulate: error: ...`` once per problem of ``message`` (its ``\\n``-separated lines)."""
    stream = stream or sys.stderr
    for line in problem_lines(message) or [""]:
        _print_safely(f"{PROG}: error: {line}", stream)


def print_internal_error(error: BaseException, stream: TextIO | None = None) -> None:
    text = escape_controls(f"{type(error).__name__}: {error}")
    _print_safely(f"{PROG}: internal error: {text} (rerun with --debug for the traceback)",
                  stream or sys.stderr)


def _print_safely(line: str, stream: TextIO) -> None:
    # A message that cannot be shown (stderr on a full device) must not become a traceback.
    try:
        print(line, file=stream, flush=True)
    except OSError:
        _quiet_stream(stream)


def _flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except OSError as error:
        raise StdoutError(error) from None


def _quiet_stream(stream: TextIO) -> None:
    """Point a failed stream's descriptor at /dev/null so that flushing it at exit succeeds."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):  # a stream without descriptor (tests)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While the command runs, SIGTERM raises ``Terminated`` (once; a repeat during cleanup is
    ignored), so temporary files are removed as on Ctrl-C. Restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def terminate(signum: int, frame: object) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str]) -> int:
    early, _ = _early_parser().parse_known_args(argv)
    pm = make_plugin_manager(
        autoload=not early.disable_plugin_autoload,
        plugins=[*plugins_from_env(os.environ), *early.plugin],
    )
    if early.version:
        _warn_load_failures(pm)
        write_stdout(_rendered(print_version, pm))
        return 0
    parser, run_parser = _build_parser()
    call_each_plugin(pm, "aisimulate_add_cli_options", parser=run_parser)
    options = parser.parse_args(argv)
    call_each_plugin(pm, "aisimulate_configure", options=options, plugin_manager=pm)
    if options.command == "plugins":
        write_stdout(_rendered(print_plugins, pm))
        return 0
    _warn_load_failures(pm)
    if options.command == "sweep":
        from aisimulate_core.cli.sweep import sweep_command

        return sweep_command(options, pm)
    if options.command == "plot":
        from aisimulate_core.cli.plot import plot_command

        return plot_command(options)
    if options.command == "compare":
        from aisimulate_core.cli.compare import compare_command

        return compare_command(options)
    from aisimulate_core.cli.run import run_command

    return run_command(options, pm)


def _rendered(show, pm: AisimPluginManager) -> str:
    out = io.StringIO()
    show(pm, out)
    return out.getvalue()


def _warn_load_failures(pm: AisimPluginManager) -> None:
    for failure in pm.load_failures:
        for line in problem_lines(failure.message()):
            _print_safely(f"{PROG}: warning: {line}", sys.stderr)


def plugins_from_env(environ: Mapping[str, str]) -> list[str]:
    """Module names listed (comma-separated) in AISIMULATE_PLUGINS, like pytest's PYTEST_PLUGINS."""
    return [name.strip() for name in environ.get(PLUGINS_ENV, "").split(",") if name.strip()]


def _add_common_options(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an internal error"
    )


def _early_parser() -> argparse.ArgumentParser:
    # Plugins must be loaded before the full parser exists: they may add options to `run`.
    parser = argparse.ArgumentParser(add_help=False)
    _add_common_options(parser)
    parser.add_argument("--version", action="store_true")
    return parser


def _build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(
        prog=PROG, description="GPU-free simulator of LLM inference serving."
    )
    parser.add_argument(
        "--version", action="store_true", help="show the core's version and the loaded plugins"
    )
    _add_common_options(parser)  # accepted before the command too; the early parse uses them
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="replay an execution payload and report its metrics")
    run.add_argument("payload", metavar="PAYLOAD", help="execution payload (JSON file)")
    run.add_argument(
        "--output", metavar="REPORT.json", help="write the whole report as JSON ('-': stdout)"
    )
    run.add_argument(
        "--per-request",
        metavar="FILE.jsonl",
        help="write one record per request: JSON lines, or CSV / Parquet by the extension "
             ".csv / .parquet ('-': stdout, JSON lines)",
    )
    run.add_argument(
        "--telemetry",
        metavar="SAMPLES.jsonl",
        help="write one telemetry sample per line: engine gauges, queues, traffic ('-': stdout)",
    )
    run.add_argument(
        "--telemetry-interval-ms",
        metavar="X",
        help="virtual time between telemetry samples, in ms (default 1000)",
    )
    run.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    run.add_argument(
        "--set", action="append", default=[], metavar="PATH=VALUE",
        help="override a payload field before validation, e.g. "
             "spec.topology.workers.initial_workers=4 (VALUE is JSON; repeatable)",
    )
    _add_common_options(run)
    from aisimulate_core.cli.sweep import add_sweep_parser

    add_sweep_parser(commands, _add_common_options)
    listing = commands.add_parser("plugins", help="list loaded plugins and their providers")
    _add_common_options(listing)
    from aisimulate_core.cli.compare import add_compare_parser
    from aisimulate_core.cli.plot import add_plot_parser

    _add_common_options(add_plot_parser(commands))
    _add_common_options(add_compare_parser(commands))
    return parser, run

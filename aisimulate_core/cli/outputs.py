"""The files ``aisimulate run`` writes: checked before the run, written whole or not at all.

A regular file (or a symlink to one) is written through a temporary file beside its real path
and renamed over it only once complete, so an interrupted or failed run keeps the previous
content. Standard output (``-``), character devices (``/dev/null``, ``/dev/stdout``) and pipes
are written in place: they cannot be replaced, and renaming over ``/dev/stdout`` as root
would replace the device node. The report and the per-request records are committed together:
both temporary files are written in full, then the records are renamed first, so no report
ever stands beside records of another run, and no temporary file survives a failure.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, TextIO

import attrs

from aisimulate_core.errors import AisimError
from aisimulate_core.messages import escape_controls

STDOUT = "-"


class CliError(AisimError):
    """A command-line level failure (unreadable payload, unwritable output)."""


class StdoutError(CliError):
    """Standard output cannot be written (a full device, a closed pipe)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(f"cannot write to standard output: {error.strerror or error}")
        self.broken_pipe = isinstance(error, BrokenPipeError)


@attrs.frozen
class Target:
    """Where one output goes: ``path`` None is standard output; ``in_place`` targets (stdout,
    devices, pipes) are written directly, the others through a temporary file."""

    option: str
    given: str
    path: Path | None
    in_place: bool

    @property
    def label(self) -> str:
        return "standard output ('-')" if self.path is None else escape_controls(self.given)


def resolve_target(option: str, given: str) -> Target:
    """The target named on the command line; CliError if it cannot be written."""
    if given == STDOUT:
        return Target(option, given, None, in_place=True)
    shown = escape_controls(given)
    try:
        status = os.stat(given)  # follows symlinks: the file a link points to is the target
    except FileNotFoundError:
        status = None  # a new file, or a dangling link: its target is created, as `>` would
    except OSError as error:
        raise _cannot_write(shown, error) from None
    if status is not None and stat.S_ISDIR(status.st_mode):
        raise CliError(f"cannot write {shown}: is a directory")
    if status is not None and (not stat.S_ISREG(status.st_mode) or _names_a_descriptor(given)):
        # a device, a pipe, or /dev/stdout and its kin even when they lead to a regular file
        # (replacing that file would leave the descriptor on the old one)
        return Target(option, given, Path(given), in_place=True)
    real = Path(os.path.realpath(given))
    if not real.parent.is_dir():
        raise CliError(f"cannot write {shown}: directory {escape_controls(str(real.parent))} does not exist")
    return Target(option, given, real, in_place=False)


_DESCRIPTOR = re.compile(r"/(?:proc/(?:self|\d+)/fd|dev/fd)/\d+\Z")


def _names_a_descriptor(given: str) -> bool:
    """Whether ``given`` or a link on its way is an open descriptor (/dev/stdout is a link to
    /proc/self/fd/1)."""
    path = os.path.abspath(given)
    for _ in range(40):  # the kernel's own limit on links followed
        if _DESCRIPTOR.match(path):
            return True
        if not os.path.islink(path):
            return False
        path = os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path)))
    return False


def writes_stdout(target: Target) -> bool:
    """Whether the target is standard output, by ``-`` or by another name of it."""
    if target.path is None:
        return True
    stdout_inode, _, _ = _identity(Target(target.option, STDOUT, None, True))
    inode, _, _ = _identity(target)
    return inode is not None and inode == stdout_inode


def _identity(target_or_path: Target | Path) -> tuple[tuple[int, int] | None, str | None, bool]:
    """(device and inode, real path, is a character device) of an output or an input; what
    is unknown (a file not created yet, a stdout without descriptor) is None."""
    if isinstance(target_or_path, Target) and target_or_path.path is None:
        real = None
        try:
            status = os.fstat(sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            return None, None, False
    else:
        path = target_or_path.path if isinstance(target_or_path, Target) else target_or_path
        real = os.path.realpath(path)
        try:
            status = os.stat(path)
        except (OSError, ValueError):
            return None, real, False
    return (status.st_dev, status.st_ino), real, stat.S_ISCHR(status.st_mode)


def _same_file(a: Target | Path, b: Target | Path) -> bool:
    """Whether two names reach one file (a character device such as a terminal may be shared)."""
    inode_a, real_a, device_a = _identity(a)
    inode_b, real_b, device_b = _identity(b)
    if device_a or device_b:
        return False
    return (inode_a is not None and inode_a == inode_b) or (real_a is not None and real_a == real_b)


def check_targets(targets: list[Target], inputs: Iterable[tuple[str, Path]]) -> None:
    """CliError (one line per problem) if two outputs are one file, or an output is an input."""
    problems = []
    if len(targets) == 2:
        first, second = targets
        if first.path is None and second.path is None:
            problems.append(f"{first.option} and {second.option} cannot both be '-' (standard output)")
        elif _same_file(first, second):
            problems.append(f"{first.option} and {second.option} name the same file "
                            f"{second.label}: give each output its own path")
    inputs = list(inputs)
    for target in targets:
        for description, path in inputs:
            if _same_file(target, path):
                problems.append(f"{target.option} {target.label}: is {description}; "
                                "writing it would destroy the input")
    if problems:
        raise CliError("\n".join(problems))


class OutputFile:
    """One target being written; ``handle`` is open from construction to commit or discard."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._temp: str | None = None
        try:
            if target.path is None:
                self.handle: TextIO = sys.stdout
            elif target.in_place:
                self.handle = open(target.path, "w", encoding="utf-8")
            else:
                self.handle = tempfile.NamedTemporaryFile(
                    "w", encoding="utf-8", dir=target.path.parent,
                    prefix=f".{target.path.name}.", suffix=".tmp", delete=False)
                self._temp = self.handle.name
        except OSError as error:  # never standard output: it is not opened here
            raise self._error(error) from None

    def write(self, text: str) -> None:
        try:
            self.handle.write(text)
        except OSError as error:
            raise self._error(error) from None

    def write_bytes(self, data: bytes) -> None:
        """Bytes to the file's binary side (Parquet records: no text is written to it)."""
        try:
            self.handle.buffer.write(data)
        except OSError as error:
            raise self._error(error) from None

    def finish_writing(self) -> None:
        """Everything is written: flush it to the file (or device) before any rename."""
        try:
            if self.handle is sys.stdout:
                self.handle.flush()
            else:
                self.handle.close()
        except OSError as error:
            raise self._error(error) from None

    def commit(self) -> None:
        """Put the complete temporary file in the target's place (nothing to do in place)."""
        if self._temp is None:
            return
        path = self.target.path
        with deferred_signals():  # renamed and forgotten as one step
            try:
                os.chmod(self._temp, _mode_for(path))
                os.replace(self._temp, path)
            except OSError as error:
                raise self._error(error) from None
            self._temp = None

    def discard(self) -> None:
        """Remove the temporary file (the target keeps its previous content)."""
        if self.handle is not sys.stdout:
            with contextlib.suppress(OSError):
                self.handle.close()
        if self._temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._temp)
            self._temp = None

    def _error(self, error: OSError) -> CliError:
        if self.target.path is None:
            return StdoutError(error)
        return _cannot_write(self.target.label, error)


def _cannot_write(label: str, error: OSError) -> CliError:
    return CliError(f"cannot write {label}: {error.strerror or error}")


def _mode_for(path: Path) -> int:
    """The permissions a replaced file keeps, or a new file's (0666 less the umask)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


class RecordWriter:
    """Per-request records (or telemetry samples) as JSON lines, written as they are handed
    over."""

    def __init__(self, out: OutputFile) -> None:
        import msgspec

        self._out = out
        self._encode = msgspec.json.Encoder().encode
        self.count = 0

    def __call__(self, record: dict[str, Any]) -> None:
        self._out.write(self._encode(record).decode("utf-8") + "\n")
        self.count += 1


class RunOutputs:
    """The report and per-request outputs of one run, opened before it and committed together.

    Use as a context manager: leaving it by an exception (an error, Ctrl-C, SIGTERM) removes
    every temporary file and leaves each target as it was.
    """

    def __init__(self, report: Target | None, records: Target | None,
                 samples: Target | None = None) -> None:
        # records and samples first: they are committed before the report
        self._targets = (records, samples, report)
        self._files: list[OutputFile] = []
        self.records: OutputFile | None = None
        self.samples: OutputFile | None = None
        self.report: OutputFile | None = None
        self.record_writer: RecordWriter | None = None
        self.sample_writer: RecordWriter | None = None

    def __enter__(self) -> RunOutputs:
        # opened here, not in __init__: once __enter__ returns, __exit__ cleans up whatever
        # interrupts the run
        records, samples, report = self._targets
        try:
            self.records = self._open(records)
            self.samples = self._open(samples)
            self.report = self._open(report)
            if self.records is not None:  # JSON lines, CSV or Parquet by the extension
                from aisimulate_core.cli.record_formats import record_format, record_writer

                self.record_writer = (record_writer(self.records, record_format(records.given))
                                      or RecordWriter(self.records))
        except BaseException:
            self.discard()
            raise
        if self.samples is not None:
            self.sample_writer = RecordWriter(self.samples)
        return self

    def _open(self, target: Target | None) -> OutputFile | None:
        if target is None:
            return None
        with deferred_signals():  # a temporary file is created and recorded as one step
            out = OutputFile(target)
            self._files.append(out)
        return out

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        if kind is not None:
            self.discard()

    def finish(self, report_json: str | None) -> None:
        """Write the report (the records were written as they came), then commit: records
        before the report."""
        close = getattr(self.record_writer, "close", None)
        if close is not None:  # a Parquet writer's last row group and footer
            close()
        if self.report is not None and report_json is not None:
            self.report.write(report_json)
        for out in self._files:
            out.finish_writing()
        for out in self._files:
            out.commit()

    def discard(self) -> None:
        with deferred_signals():
            for out in self._files:
                out.discard()


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """SIGINT and SIGTERM wait for the end of the block (they are delivered then), so that a
    temporary file never exists without being recorded for cleanup."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def write_stdout(text: str) -> None:
    """Print to standard output; a failure is a StdoutError (one line, exit 2)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as error:
        raise StdoutError(error) from None

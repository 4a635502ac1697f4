"""Where points run: local processes (``--jobs N``) or Ray tasks (``--executor ray``).

An executor takes tasks ``(key, document, labels)`` and yields ``(key, result)`` as each point
finishes, in any order; the result is ``point.evaluate``'s dict. Ray is imported only when the
Ray executor is made (the ``sweep`` extra); each trace file is put in Ray's object store once
per sweep and written to a local file once per node.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from aisimulate_core.sweep.point import evaluate, localize_traces, trace_paths
from aisimulate_core.sweep.spec import SWEEP_EXTRA, SweepError

Task = tuple  # (key, document, labels)


def missing_extra(module: str, what: str) -> SweepError:
    return SweepError(f"{what} needs {module}, which is not installed: pip install '{SWEEP_EXTRA}'")


def _quiet_worker() -> None:
    """A worker process leaves Ctrl-C and SIGTERM to its parent, which ends the pool itself
    (the command's SIGTERM handler, inherited by a fork, would print a traceback here)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _evaluate_task(task: tuple) -> tuple:
    key, document, plugin_options, labels = task
    return key, evaluate(document, plugin_options, labels)


class LocalExecutor:
    """``jobs`` worker processes (forked where the platform can: they start with the modules
    and caches of this one); one job runs the points in this process. An interrupt ends the
    workers at once (their points are not in the ledger: a rerun runs them)."""

    name = "local"

    def __init__(self, jobs: int, plugin_options: tuple) -> None:
        self.jobs = max(1, jobs)
        self.plugin_options = plugin_options
        self._pool = None

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[Any, dict]]:
        tasks = list(tasks)
        if self.jobs == 1 or len(tasks) <= 1 and self._pool is None:
            for key, document, labels in tasks:
                yield key, evaluate(document, self.plugin_options, labels)
            return
        if self._pool is None:
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else None)
            self._pool = context.Pool(self.jobs, initializer=_quiet_worker)
        work = [(key, document, self.plugin_options, labels) for key, document, labels in tasks]
        try:
            yield from self._pool.imap_unordered(_evaluate_task, work, chunksize=1)
        except BaseException:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None


def _trace_dir() -> Path:
    return Path(tempfile.gettempdir()) / "aisimulate-ray-traces"


def _ray_evaluate(document: dict, traces: dict, plugin_options: tuple, labels: tuple) -> dict:
    """A Ray task: the point's trace files from the object store (once per node), then run."""
    import ray

    files = {}
    for given, (ref, digest, name) in traces.items():
        local = _trace_dir() / digest / name
        if not local.exists():
            local.parent.mkdir(parents=True, exist_ok=True)
            data = ray.get(ref)
            temp = local.with_name(f".{name}.{os.getpid()}.tmp")
            temp.write_bytes(data)
            os.replace(temp, local)
        files[given] = local
    return evaluate(localize_traces(document, files), plugin_options, labels)


def _check_reachable(address: str | None) -> None:
    """A plain ``HOST:PORT`` that refuses connections is one line at once (Ray itself retries
    for minutes); ``auto``, ``ray://`` and other forms are left to Ray."""
    import re
    import socket

    match = re.fullmatch(r"\[?([^\[\]/]+?)\]?:(\d+)", address or "")
    if match is None:
        return
    try:
        socket.create_connection((match.group(1), int(match.group(2))), timeout=5).close()
    except OSError as error:
        raise SweepError(f"--executor ray: cannot reach Ray at {address}: "
                         f"{error.strerror or error}") from None


class RayExecutor:
    """Points as Ray tasks (one CPU each) on the cluster at ``address`` (None: the Ray this
    process already joined, or a new local one); results stream back as they finish."""

    name = "ray"

    def __init__(self, address: str | None, plugin_options: tuple, digests) -> None:
        try:
            import ray
        except ImportError:
            raise missing_extra("ray", "--executor ray") from None
        self._ray = ray
        self._owned = not ray.is_initialized()
        if self._owned:
            _check_reachable(address)
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         logging_level="ERROR")
            except Exception as error:  # Ray's own errors: one line naming the address
                where = f"at {address}" if address else "on this machine"
                raise SweepError(f"--executor ray: cannot start or reach Ray {where}: "
                                 f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}") from None
        self._remote = ray.remote(num_cpus=1)(_ray_evaluate)
        self.plugin_options = plugin_options
        self._digests = digests
        self._traces: dict[str, tuple] = {}

    def _trace_refs(self, document: dict) -> dict:
        refs = {}
        for given in trace_paths(document):
            if not os.path.isfile(given):
                continue  # a directory or a missing file: the point says so itself
            if given not in self._traces:
                digest = self._digests.of(given)
                self._traces[given] = (self._ray.put(Path(given).read_bytes()), digest,
                                       os.path.basename(given))
            refs[given] = self._traces[given]
        return refs

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[Any, dict]]:
        ray = self._ray
        pending = {self._remote.remote(document, self._trace_refs(document), self.plugin_options,
                                       labels): key
                   for key, document, labels in tasks}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    yield pending.pop(ref), ray.get(ref)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise

    def close(self) -> None:
        self._traces.clear()
        if self._owned:
            self._ray.shutdown()

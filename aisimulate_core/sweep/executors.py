"""Where points run: local processes (``--jobs N``) or Ray tasks (``--executor ray``).

An executor takes tasks ``(key, document, labels)`` and yields ``(key, result)`` as each point
finishes, in any order; the result is ``point.evaluate``'s dict. Ray is imported only when the
Ray executor is made (the ``sweep`` extra); each trace file is put in Ray's object store once
per sweep and written to a local file once per node.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from aisimulate_core.sweep.point import evaluate, localize_traces, trace_paths
from aisimulate_core.sweep.spec import SWEEP_EXTRA, SweepError

Task = tuple  # (key, document, labels)


def missing_extra(module: str, what: str) -> SweepError:
    return SweepError(f"{what} needs {module}, which is not installed: pip install '{SWEEP_EXTRA}'")


class LocalExecutor:
    """``jobs`` worker processes (forked where the platform can: they start with the modules
    and caches of this one); one job runs the points in this process."""

    name = "local"

    def __init__(self, jobs: int, plugin_options: tuple) -> None:
        self.jobs = max(1, jobs)
        self.plugin_options = plugin_options
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[Any, dict]]:
        tasks = list(tasks)
        if self.jobs == 1 or len(tasks) <= 1 and self._pool is None:
            for key, document, labels in tasks:
                yield key, evaluate(document, self.plugin_options, labels)
            return
        if self._pool is None:
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else None)
            self._pool = concurrent.futures.ProcessPoolExecutor(self.jobs, mp_context=context)
        futures = {self._pool.submit(evaluate, document, self.plugin_options, labels): key
                   for key, document, labels in tasks}
        try:
            for future in concurrent.futures.as_completed(futures):
                yield futures[future], future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
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

"""Runs ../shared/tools/peer_run.py, with the reference's conversion of its result timed too.

The reference's replay call returns a result object whose fields (``summary``, ``per_request``,
``telemetry``, ``lifecycle_operations``) are made into Python objects when they are read
(20,000 per-request records took 0.28 s to read here, more than the 0.23 s replay). peer_run
stops its clock (``outer_wall_s``) when the call returns, before it reads them; our timed call
returns a report with its records already made. So that both sides do the same work, this
wrapper adds the time of those reads to ``outer_wall_s`` (and reports it alone as
``result_read_s``). Nothing else of peer_run changes: same arguments, same output line.

    python bench/ref_timed.py PAYLOAD.json [peer_run flags]   (with the reference's Python)
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
import time
from pathlib import Path

import dynamo._core as core

PEER_RUN = Path(__file__).resolve().parent.parent.parent / "shared" / "tools" / "peer_run.py"
_READ_S = [0.0]


class _TimedResult:
    """The reference's result, each field read timed."""

    def __init__(self, result):
        self._result = result

    def __getattr__(self, name):
        started = time.perf_counter()
        value = getattr(self._result, name)
        _READ_S[0] += time.perf_counter() - started
        return value


def _timed(replay):
    def call(*args, **kwargs):
        return _TimedResult(replay(*args, **kwargs))
    return call


def main():
    for name in ("run_mocker_trace_replay", "run_mocker_synthetic_trace_replay"):
        setattr(core, name, _timed(getattr(core, name)))
    sys.argv = [str(PEER_RUN), *sys.argv[1:]]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            runpy.run_path(str(PEER_RUN), run_name="__main__")
        except SystemExit as stop:
            if stop.code not in (None, 0):
                sys.stdout.write(printed.getvalue())
                raise
    lines = printed.getvalue().strip().splitlines()
    out = json.loads(lines[-1])
    out["result_read_s"] = _READ_S[0]
    out["outer_wall_s"] += _READ_S[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()

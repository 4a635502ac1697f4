"""The cluster cases give the same report, records and samples on every run and on the
pure-Python backend: each case of ../shared/bench/cluster/ (KV router, scheduled scaling,
telemetry, weka), with the flags its README gives, run twice through ``run_replay`` and once
more in a subprocess with ``AISIMULATE_BACKEND=python``. Unlike the reference, whose KV router
breaks cost ties at random (CLUSTER.md §2.4), the project's runs are identical to the byte,
worker indices and record uuids included; only the host-speed keys differ."""

import json
import os
import subprocess
import sys

import pytest

from aisimulate_core import run_replay
from aisimulate_core.native import BACKEND
from reference import HOST_KEYS, ROOT
from test_cluster_cases import SHARED

BENCH = ROOT.parent / "shared" / "bench" / "cluster"

# case -> its telemetry interval (None: no --telemetry), the flags of that folder's README
CASES = SHARED

if not BENCH.is_dir():
    pytest.skip(f"{BENCH} is not beside the checkout", allow_module_level=True)

# run from the project root (the cases' paths are relative to it); prints one JSON object
SCRIPT = """
import json, sys
from aisimulate_core import run_replay
from aisimulate_core.native import BACKEND
cases = json.loads(sys.argv[1])
out = {"backend": BACKEND, "runs": {}}
for name, interval in cases.items():
    report = run_replay(open(f"../shared/bench/cluster/{name}.json").read(),
                        telemetry_interval_ms=interval)
    out["runs"][name] = {"summary": report.summary, "per_request": report.per_request,
                         "telemetry": report.telemetry}
print(json.dumps(out))
"""


def comparable(run):
    """A run as JSON values (lists, not tuples), without the host-speed summary keys."""
    run = json.loads(json.dumps(run))
    run["summary"] = {k: v for k, v in run["summary"].items() if k not in HOST_KEYS}
    return run


def in_process(name):
    report = run_replay((BENCH / f"{name}.json").read_text(), telemetry_interval_ms=CASES[name])
    return comparable({"summary": report.summary, "per_request": report.per_request,
                       "telemetry": report.telemetry})


@pytest.fixture(scope="module")
def on_python_backend():
    env = dict(os.environ, AISIMULATE_BACKEND="python")
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CASES)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["backend"] == "python"
    return {name: comparable(run) for name, run in out["runs"].items()}


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_report_records_and_samples_twice_and_on_the_python_backend(
        name, at_root, on_python_backend):
    first, second = in_process(name), in_process(name)
    assert first == second
    assert first == on_python_backend[name]
    # the comparison saw the run's substance: records, and samples where the case has them
    assert first["per_request"] and first["summary"]["completed_requests"] > 0
    assert (first["telemetry"] is not None) == (CASES[name] is not None)
    if CASES[name] is not None:
        assert len(first["telemetry"]["samples"]) > 2


def test_the_in_process_runs_use_the_c_backend():
    # else the comparison above would set the Python backend against itself
    assert BACKEND == "c"

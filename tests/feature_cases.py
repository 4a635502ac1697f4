"""What the feature tests (test_features_*.py) share: finding a case's payload and the
reference's output (a shared case of ../shared/bench/features/ compared in place, or one of our
own recorded by bench/record_reference.py), and running cases again in one subprocess on the
Python backend (``AISIMULATE_BACKEND=python``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_CASES = ROOT.parent / "shared" / "bench" / "features"


def case_output(name, shared, recorded_dir):
    """(payload path, the reference's output as peer_run printed it) of case ``name``: a shared
    case if it is in ``shared``, else ours recorded in ``recorded_dir``."""
    if name in shared:
        payload = SHARED_CASES / f"{name}.json"
        if not payload.exists():
            pytest.skip(f"{payload} is not beside the checkout")
        return payload, json.loads((SHARED_CASES / f"{name}.expected.json").read_text())
    fixture = json.loads((recorded_dir / f"{name}.json").read_text())
    theirs = dict(fixture["summary"], per_request=fixture["per_request"])
    return ROOT / fixture["payload"], theirs


def run_payload(payload_text):
    """Our report of a payload run from the project root (its paths are relative to it)."""
    from aisimulate_core import run_replay

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return run_replay(payload_text)
    finally:
        os.chdir(cwd)


def python_backend_problems(module, names):
    """``{name: problems}`` of the cases whose ``module.problems_of(name)`` is not empty, run in
    one subprocess with AISIMULATE_BACKEND=python."""
    script = ("import json, sys\n"
              f"from {module} import problems_of\n"
              "out = {n: problems_of(n)[:5] for n in sys.argv[1:]}\n"
              "print(json.dumps(out))\n")
    env = dict(os.environ, AISIMULATE_BACKEND="python",
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", script, *names], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {n: p for n, p in result.items() if p}

"""The same payload gives the same report: run twice, and on the pure-Python backend."""

import json
import os
import subprocess
import sys

from reference import HOST_KEYS, ROOT

PAYLOAD = ROOT / "tests" / "fixtures" / "payloads" / "vllm_kv_pressure_lifo.json"

SCRIPT = """
import json, sys
from aisimulate_core import run_replay
from aisimulate_core.native import BACKEND
report = run_replay(open(sys.argv[1]).read())
print(json.dumps({"backend": BACKEND, "summary": report.summary,
                  "per_request": report.per_request}))
"""


def run_with_backend(backend):
    env = dict(os.environ, AISIMULATE_BACKEND=backend)
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(PAYLOAD)], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def without_host_figures(result):
    summary = {k: v for k, v in result["summary"].items() if k not in HOST_KEYS}
    return summary, result["per_request"]


def test_same_payload_same_report_twice_and_on_both_backends():
    first = run_with_backend("c")
    second = run_with_backend("c")
    python = run_with_backend("python")
    assert (first["backend"], python["backend"]) == ("c", "python")
    assert without_host_figures(first) == without_host_figures(second)
    assert without_host_figures(first) == without_host_figures(python)
    # the payload really preempts, so both backends' pools were exercised
    assert sum(r["readmission_count"] for r in first["per_request"]) > 0

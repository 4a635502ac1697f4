"""Helpers to compare our reports with the reference simulator's recorded fixtures.

Fixtures live in tests/fixtures/reference/ (see its README); payload paths in them are relative
to the project root, so payloads are run from there.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "reference"

# figures of the host, not of the simulated deployment
HOST_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}


def load_fixture(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


def run_fixture(name, **kwargs):
    """Run a fixture's payload with our simulator from the project root; returns the Report."""
    from aisimulate_core import run_replay

    fixture = load_fixture(name)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        payload = (ROOT / fixture["payload"]).read_text()
        return run_replay(payload, **kwargs), fixture
    finally:
        os.chdir(cwd)


def close(a, b, rel=1e-9, abs_tol=1e-9):
    if a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=rel, abs_tol=abs_tol)
    return a == b


def summary_mismatches(ours, ref, rel=1e-9):
    """Keys whose values differ (host figures excluded); key sets must be equal too."""
    problems = []
    if list(ours) != list(ref):
        problems.append(("<keys>", list(ours), list(ref)))
    for key, expected in ref.items():
        if key in HOST_KEYS:
            continue
        if not close(ours.get(key), expected, rel):
            problems.append((key, ours.get(key), expected))
    return problems


RECORD_FIELDS = ("session_id", "turn_index", "arrival_time_ms", "first_admit_ms",
                 "terminal_time_ms", "first_token_ms", "last_token_ms", "ttft_ms", "ttst_ms",
                 "e2e_latency_ms", "itl_ms", "input_length", "requested_output_length",
                 "output_length", "reused_input_tokens", "decode_worker_idx",
                 "admission_count", "readmission_count", "terminal_status")


def record_key(record):
    out = []
    for field in RECORD_FIELDS:
        value = record.get(field)
        if isinstance(value, float):
            value = round(value, 6)
        out.append(value)
    out.append(tuple((round(a["at_ms"], 6), a["reused_input_tokens"], a["is_readmission"])
                     for a in record.get("admission_history", ())))
    return tuple(out)


def record_mismatches(ours, ref):
    """Records are matched as a multiset of their observable facts (reference uuids are random)."""
    mine = sorted(map(record_key, ours), key=repr)
    theirs = sorted(map(record_key, ref), key=repr)
    if mine == theirs:
        return []
    missing = [r for r in theirs if r not in mine]
    extra = [r for r in mine if r not in theirs]
    return [("missing", missing[:3]), ("extra", extra[:3]), ("counts", len(mine), len(theirs))]

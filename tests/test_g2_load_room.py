"""How much G1 room a G2 host hit needs before its H2D load starts (FEATURES.md §5.4), against
the reference's recorded output.

The rule, settled on the reference (ai-dynamo-runtime 1.6.1) with the cases of
tests/fixtures/g2_load_room/ (generate.py there builds and records them): a host hit starts
its load only if its whole request fits in the G1 blocks that are neither held nor kept for
the loads started before it (in this pass or an earlier one) and not yet admitted; each such
load keeps the blocks its request still needs beyond those it holds (its G1 hits and the
loaded blocks). A request admitted without a load is checked against the held blocks alone.
Without the rule, a load started beside another and both could end up holding half their
blocks with neither admissible (bench/fuzz_g2_offload.py seed 5 case 314: a false "can never
be scheduled" error).
"""

from __future__ import annotations

import json

import pytest

from cluster_compare import compare
from feature_cases import ROOT, python_backend_problems, run_payload

FIXTURES = ROOT / "tests" / "fixtures" / "g2_load_room"
CASES = sorted(p.stem for p in (FIXTURES / "reference").glob("*.json"))


def reference(name):
    fixture = json.loads((FIXTURES / "reference" / f"{name}.json").read_text())
    return ROOT / fixture["payload"], dict(fixture["summary"], per_request=fixture["per_request"])


def ours(name):
    payload, _ = reference(name)
    return run_payload(payload.read_text())


def problems_of(name):
    """Differences between our run of case ``name`` and the reference's."""
    _, theirs = reference(name)
    report = ours(name)
    return compare(report.summary, report.per_request, theirs)


def test_cases_are_recorded():
    assert len(CASES) == 7


@pytest.mark.parametrize("name", CASES)
def test_case_matches_the_reference(name):
    problems = problems_of(name)
    assert problems == [], "\n".join(problems[:20])


def admitted(report, isl, osl):
    """The first admission time of the request of ``isl`` / ``osl`` tokens."""
    (record,) = [r for r in report.per_request
                 if (r["input_length"], r["output_length"]) == (isl, osl)]
    return record["admission_history"][0]["at_ms"]


# the request whose load waits (or not) for the room kept by the loads before it: (case,
# its input / output lengths, its first admission on the reference)
ADMISSIONS = [
    ("load_room_same_pass", 80, 1, 118.0),        # waits for C's rest: loads 114 -> 118
    ("load_room_same_pass_fits", 64, 3, 114.0),   # fits beside C's rest: loads at 100
    ("load_room_in_flight", 80, 3, 142.0),        # C's load in flight: loads 126 -> 142
    ("load_room_miss_beside", 80, 3, 100.0),      # no load: checked against held blocks only
    ("load_room_two_rests", 80, 3, 124.0),        # both rests before it count
    ("load_room_two_rests_fits", 64, 4, 114.0),
]


@pytest.mark.parametrize("name, isl, osl, at_ms", ADMISSIONS)
def test_the_load_waits_for_the_rooms_kept(name, isl, osl, at_ms):
    _, theirs = reference(name)
    recorded = [r for r in theirs["per_request"]
                if (r["input_length"], r["output_length"]) == (isl, osl)]
    assert recorded[0]["admission_history"][0]["at_ms"] == at_ms
    assert admitted(ours(name), isl, osl) == at_ms


def test_cases_match_on_the_python_backend():
    """Every case again with AISIMULATE_BACKEND=python (Python block pools and tier pools)."""
    assert python_backend_problems("test_g2_load_room", CASES) == {}

"""How much G1 room a G2 host hit needs before its H2D load starts (FEATURES.md §5.4), against
the reference's recorded output.

The rule, settled on the reference (ai-dynamo-runtime 1.6.1) with the ``g2_load_room_*`` and
``g2_fuzz_seed5_case314`` cases of tests/fixtures/features_offload/ (its generate.py builds
them, bench/record_reference.py records them, tests/test_features_offload.py compares each with
the reference on both backends): a host hit starts
its load only if its whole request fits in the G1 blocks that are neither held nor kept for
the loads started before it (in this pass or an earlier one) and not yet admitted; each such
load keeps the blocks its request still needs beyond those it holds (its G1 hits and the
loaded blocks). A request admitted without a load is checked against the held blocks alone.
Without the rule, a load started beside another and both could end up holding half their
blocks with neither admissible (bench/fuzz_g2_offload.py seed 5 case 314: a false "can never
be scheduled" error). Here: the admission each case turns on, on the reference and ours.
"""

from __future__ import annotations

import json

import pytest

from feature_cases import ROOT, run_payload

RECORDED = ROOT / "tests" / "fixtures" / "reference" / "features_offload"
CASES = sorted(p.stem for p in RECORDED.glob("g2_load_room_*.json")) + ["g2_fuzz_seed5_case314"]


def reference(name):
    fixture = json.loads((RECORDED / f"{name}.json").read_text())
    return ROOT / fixture["payload"], dict(fixture["summary"], per_request=fixture["per_request"])


def ours(name):
    payload, _ = reference(name)
    return run_payload(payload.read_text())


def test_cases_are_recorded():
    assert len(CASES) == 7
    assert all((RECORDED / f"{name}.json").exists() for name in CASES)


def admitted(report, isl, osl):
    """The first admission time of the request of ``isl`` / ``osl`` tokens."""
    (record,) = [r for r in report.per_request
                 if (r["input_length"], r["output_length"]) == (isl, osl)]
    return record["admission_history"][0]["at_ms"]


# the request whose load waits (or not) for the room kept by the loads before it: (case,
# its input / output lengths, its first admission on the reference)
ADMISSIONS = [
    ("g2_load_room_same_pass", 80, 1, 118.0),        # waits for C's rest: loads 114 -> 118
    ("g2_load_room_same_pass_fits", 64, 3, 114.0),   # fits beside C's rest: loads at 100
    ("g2_load_room_in_flight", 80, 3, 142.0),        # C's load in flight: loads 126 -> 142
    ("g2_load_room_miss_beside", 80, 3, 100.0),      # no load: checked against held blocks only
    ("g2_load_room_two_rests", 80, 3, 124.0),        # both rests before it count
    ("g2_load_room_two_rests_fits", 64, 4, 114.0),
]


@pytest.mark.parametrize("name, isl, osl, at_ms", ADMISSIONS)
def test_the_load_waits_for_the_rooms_kept(name, isl, osl, at_ms):
    _, theirs = reference(name)
    recorded = [r for r in theirs["per_request"]
                if (r["input_length"], r["output_length"]) == (isl, osl)]
    assert recorded[0]["admission_history"][0]["at_ms"] == at_ms
    assert admitted(ours(name), isl, osl) == at_ms


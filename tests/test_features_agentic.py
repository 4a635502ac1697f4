"""``agentic_lanes`` (FEATURES.md §3) and the agentic outputs against the reference.

The shared case f4 (../shared/bench/features/) is compared in place; our own recorded cases
(tests/fixtures/features_agentic/, recorded by bench/record_reference.py into
tests/fixtures/reference/features_agentic/, README.md there says what each settles) cover each
rule of §3, lanes on the weka and Dynamo agentic formats and on disaggregated deployments, and
the per-request ``agentic`` object and lifecycle rounds the reference writes. Records are matched
by ``request_id`` in the canonical form of FEATURES.md §10 (tests/cluster_compare.py); the two
BLAKE3 digests (``agentic_graph.graph_digest``, ``agentic_lifecycle_digest``) must also equal the
reference's byte for byte. Every case runs on the default backend in process and, all together
in one subprocess, with ``AISIMULATE_BACKEND=python``.
"""

from __future__ import annotations

import json

import pytest

from cluster_compare import compare
from feature_cases import ROOT, SHARED_CASES, case_output, python_backend_problems, run_payload

OWN_PAYLOADS = ROOT / "tests" / "fixtures" / "features_agentic"
OWN_RECORDED = ROOT / "tests" / "fixtures" / "reference" / "features_agentic"

SHARED = ["f4_lanes_agentic"]
OWN = sorted(p.stem for p in OWN_RECORDED.glob("*.json")
             if "error" not in json.loads(p.read_text()) and not p.stem.startswith("known_"))
# differences in the ranks, not in the driver (README.md in the cases' folder)
KNOWN = sorted(p.stem for p in OWN_RECORDED.glob("known_*.json"))
ERRORS = sorted(p.stem for p in OWN_RECORDED.glob("*.json")
                if "error" in json.loads(p.read_text()))


def _case(name):
    return case_output(name, SHARED, OWN_RECORDED)


def problems_of(name):
    """Differences between our run of case ``name`` and the reference's, digests included."""
    payload, theirs = _case(name)
    report = run_payload(payload.read_text())
    problems = compare(report.summary, report.per_request, theirs)
    ours = report.summary
    if "agentic_graph" not in theirs:
        return problems                  # a case without an agentic driver: no digests
    if ours["agentic_graph"]["graph_digest"] != theirs["agentic_graph"]["graph_digest"]:
        problems.append("$.summary.agentic_graph.graph_digest differs")
    if ours["agentic_lifecycle_digest"] != theirs["agentic_lifecycle_digest"]:
        problems.append("$.summary.agentic_lifecycle_digest differs")
    return problems


@pytest.mark.parametrize("name", SHARED + OWN)
def test_case_matches_the_reference(name):
    problems = problems_of(name)
    assert problems == [], "\n".join(problems[:20])


@pytest.mark.xfail(strict=True, reason="README.md of the cases: an arrival in a later round of "
                   "the instant joins a pass its SGLang worker started then (the rank)")
@pytest.mark.parametrize("name", KNOWN)
def test_known_rank_difference(name):
    assert problems_of(name) == []


def test_cases_match_on_the_python_backend():
    """Every case again with AISIMULATE_BACKEND=python (Python block pool and queues)."""
    names = [n for n in SHARED if (SHARED_CASES / f"{n}.json").exists()] + OWN
    assert python_backend_problems("test_features_agentic", names) == {}


def _records(name):
    _, theirs = _case(name)
    return {r["request_id"]: r for r in theirs["per_request"]}


def test_the_worked_example_dispatches_as_features_md_says():
    """FEATURES.md §3's example, read off the recorded cases (the rule, not only a match)."""
    expected = {"none": [50, 87, 20, 30, 0, 3, 5], "l1": [0, 27, 47, 57, 82, 85, 122],
                "l2": [0, 37, 0, 10, 35, 38, 70], "l3": [0, 37, 0, 10, 0, 3, 35],
                "l8": [0, 37, 0, 10, 0, 3, 0]}
    for suffix, times in expected.items():
        records = _records(f"lanes_doc_example_{suffix}")
        got = [records[r]["dispatched_at_ms"] for r in ("a1", "a2", "b1", "b2", "c1", "c2", "d1")]
        assert got == times, suffix
        assert all(r["arrival_time_ms"] == r["dispatched_at_ms"] for r in records.values())
    lanes = {r["request_id"]: r["agentic"]["lane_id"]
             for r in _records("lanes_doc_example_l2").values()}
    # pA, pB start on lanes 0, 1; pB ends first (35): pC takes lane 1; pA (70) hands pD lane 0
    assert lanes == {"a1": "lane:0", "a2": "lane:0", "b1": "lane:1", "b2": "lane:1",
                     "c1": "lane:1", "c2": "lane:1", "d1": "lane:0"}


def test_same_instant_settlements_free_lanes_in_graph_order():
    records = _records("lanes_same_instant_settlements")
    assert records["c1"]["agentic"]["lane_id"] == "lane:1"   # y1 (play b, lane 1) sorts first
    assert records["d1"]["agentic"]["lane_id"] == "lane:0"


def test_a_play_with_several_roots_names_no_root():
    records = _records("agentic_multi_root_and_parent")
    assert all("root_id" not in records[r]["agentic"] for r in ("r1", "r2", "r3"))
    assert records["x2"]["agentic"]["root_id"] == "x1"
    assert records["r3"]["agentic"]["parent_id"] == "r1"      # not r2, written first


def test_lanes_of_a_standard_dynamo_trace_are_one_clear_error():
    from aisimulate_core.errors import AisimError

    for name in ERRORS:
        fixture = json.loads((OWN_RECORDED / f"{name}.json").read_text())
        assert "agentic_lanes requires an agentic Dynamo request trace" in fixture["error"]
        with pytest.raises(AisimError) as err:
            run_payload((ROOT / fixture["payload"]).read_text())
        assert str(err.value) == ("$.traffic.agentic_lanes: requires an agentic trace "
                                  "(trace_format 'dynamo' loaded sessions), got 2")


@pytest.mark.parametrize("lanes, rule", [(0, "must be > 0, got 0"),
                                         (-1, "must be >= 0, got -1")])
def test_lanes_must_be_positive(lanes, rule):
    from aisimulate_core.errors import AisimError

    doc = json.loads((OWN_PAYLOADS / "lanes_doc_example_l1.json").read_text())
    doc["traffic"]["agentic_lanes"] = lanes
    with pytest.raises(AisimError) as err:
        run_payload(json.dumps(doc))
    assert f"$.traffic.agentic_lanes: {rule}" in str(err.value)


def test_lanes_need_an_agentic_format():
    from aisimulate_core.errors import AisimError

    doc = json.loads((ROOT / "tests/fixtures/payloads/trace_mooncake_sessions.json").read_text())
    doc["traffic"]["agentic_lanes"] = 2
    with pytest.raises(AisimError) as err:
        run_payload(json.dumps(doc))
    assert "$.traffic.agentic_lanes: requires trace_format" in str(err.value)


def _driver(lanes, *nodes):
    from aisimulate_core.workload.agentic import AgenticDriver
    from aisimulate_core.workload.graph import AgenticNode, AgenticTrace, Dependency

    built = [AgenticNode(rid, play, "s", 4, 1, [k + 1], nb, [Dependency(*d) for d in deps],
                         source_play_ordinal=ordinal, where=f"g.jsonl:{rid}")
             for k, (rid, play, nb, deps, ordinal) in enumerate(nodes)]
    return AgenticDriver(AgenticTrace.build(4, built, source_format="test", source_digest="d",
                                            origin="g.jsonl"), lanes=lanes)


def test_a_lane_frees_at_the_last_terminal_not_at_the_source_release():
    """A disaggregated source still held settles the play later; the lane is free at once."""
    d = _driver(1, ("a", "p0", 5.0, (), 0), ("b", "p1", 30.0, (), 1))
    assert d.next_ready_ms() == 0.0                  # p0 shifted: its root at the lane start
    a, = d.pop_ready(0.0, 10)
    d.on_terminal(a, 12.0, "completed", quiescent=False)
    assert d.next_ready_ms() == 12.0                 # p1 starts at a's terminal
    b, = d.pop_ready(12.0, 10)
    assert (b.request_id, b.agentic["lane_id"]) == ("b", "lane:0")
    d.on_quiescent(a, 20.0)
    d.on_terminal(b, 30.0, "completed")
    assert [(o["play_id"], o["settled_at_ms"]) for o in d.play_outcomes()] == [
        ("p0", 20.0), ("p1", 30.0)]


def test_a_failed_play_waits_for_its_dispatched_nodes_then_frees_its_lane():
    d = _driver(1, ("r", "p0", 0.0, (), 0), ("s", "p0", 0.0, [("r", "dispatch", 0.0, "spawn")], 0),
                ("t", "p0", 0.0, [("s", "completion", 0.0, "sequence")], 0),
                ("n", "p1", 0.0, (), 1))
    r, s = d.pop_ready(0.0, 10)
    d.on_terminal(s, 3.0, "rejected")                # fails p0, skips t; r still runs
    assert d.next_ready_ms() == float("inf")
    d.on_terminal(r, 40.0, "completed")
    assert d.next_ready_ms() == 40.0
    n, = d.pop_ready(40.0, 10)
    assert n.request_id == "n"
    d.on_terminal(n, 50.0, "completed")
    assert d.trajectories() == (2, [10.0])           # only p1 completed: 50 - 40



def test_a_later_round_arrival_at_a_pass_end_of_an_extended_run_waits_for_the_next_pass():
    """RankBase.truncate: an arrival at a pass end of an extended run cuts it there, unless the
    passes of that instant started already (it came in a later round): then the pass starting
    then takes it first (vllm_random_126: the wheel admits p7n4c at 107.5, not 102.5)."""
    from aisimulate_core.engine.rank_base import RankBase

    def run():
        rank = RankBase()
        rank._macro_ends = [97.5, 102.5, 107.5, 112.5]
        rank.pass_end_ms = 112.5
        return rank
    first, later, between = run(), run(), run()
    assert first.truncate(102.5) == 102.5
    assert later.truncate(102.5, started=True) == 107.5
    assert later._macro_ends == [97.5, 102.5, 107.5]
    assert between.truncate(103.0, started=True) == 107.5   # inside a pass: no difference

"""Trace replays against the reference simulator's recorded reports (tests/fixtures/reference).

Every trace format and driver reproduces the reference's per-request timings exactly; records
are matched as multisets of their observable facts, summaries at 1e-9 relative. The agentic
summaries match whole, their BLAKE3 identities (``agentic_graph.graph_digest``,
``agentic_lifecycle_digest``) byte for byte.
"""

import os

import pytest

from reference import (ROOT, load_fixture, record_mismatches, run_fixture, summary_mismatches)
from aisimulate_core import run_replay

TRACE_CASES = [
    # the SEMANTICS.md cases, vLLM behaviours on traces, the real trace cut at 60 s
    "sem_one_isl16_osl4", "sem_three_isl16_osl4", "sem_one_osl1", "sem_two_isl1000_budget512",
    "sem_poly_isl1000_osl4", "vllm_max_model_len", "vllm_no_chunked_prefill",
    "mooncake_conversation_60s_2w",
    # formats and drivers
    "trace_mooncake_sessions", "trace_mooncake_sessions_conc2", "trace_mooncake_sessions_speedup",
    "trace_mooncake_delta", "trace_mooncake_delta_conc1", "trace_applied_compute_conc2",
    "trace_dynamo_standard", "synthetic_session_delay_conc2", "synthetic_session_poisson_groups",
]
AGENTIC_CASES = ["trace_agentic_v2", "trace_agentic_v2_speedup", "trace_agentic_failure",
                 "trace_dynamo_agentic"]


@pytest.mark.parametrize("name", TRACE_CASES)
def test_trace_replay_matches_reference(name):
    report, fixture = run_fixture(name)
    assert summary_mismatches(report.summary, fixture["summary"]) == []
    assert record_mismatches(report.per_request, fixture["per_request"]) == []


def agentic_facts(records):
    return sorted((r["request_id"], r["play_id"], r["session_id"], r["dispatched_at_ms"],
                   r["arrival_time_ms"], r["terminal_status"]) for r in records)


def check_agentic(report, fixture):
    assert summary_mismatches(report.summary, fixture["summary"]) == []
    assert record_mismatches(report.per_request, fixture["per_request"]) == []
    assert agentic_facts(report.per_request) == agentic_facts(fixture["per_request"])


@pytest.mark.parametrize("name", AGENTIC_CASES)
def test_agentic_replay_matches_reference(name):
    check_agentic(*run_fixture("agentic/" + name))


def test_legacy_agentic_rows_replay_like_the_same_graph_in_v2():
    # the reference release reads only v2 files; the fixture is the legacy graph written as v2
    fixture = load_fixture("agentic/trace_agentic_legacy_as_v2")
    payload = (ROOT / "tests/fixtures/payloads/trace_agentic_legacy.json").read_text()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        report = run_replay(payload)
    finally:
        os.chdir(cwd)
    check_agentic(report, fixture)


def test_failure_fixture_really_fails_a_play():
    summary = load_fixture("agentic/trace_agentic_failure")["summary"]
    assert (summary["total_trajectories"], summary["completed_trajectories"]) == (2, 1)
    assert summary["agentic_play_outcomes"][0]["failure_status"] == "rejected"


@pytest.mark.parametrize("name", ["b3_mooncake_conversation_4w", "b4_sessions_cache_pressure"])
def test_bench_trace_and_session_payloads_match_the_reference(name):
    report, fixture = run_fixture(name)
    ref, ours = fixture["summary"], report.summary
    for key in ("num_requests", "completed_requests", "total_input_tokens",
                "total_output_tokens", "committed_prefill_tokens"):
        assert ours[key] == ref[key], key
    # the tolerances are 2% / 5% / 1% / 0.01; the replay is exact to rounding noise
    assert summary_mismatches(ours, ref) == []

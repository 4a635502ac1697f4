"""Our reports against the reference simulator's recorded ones (tests/fixtures/reference).

The vLLM rank reproduces the reference's per-request timings exactly, so summaries are compared
at 1e-9 relative (only host-speed figures are skipped) and per-request records as multisets of
their observable facts.
"""

import pytest

from reference import load_fixture, record_mismatches, run_fixture, summary_mismatches

SYNTHETIC_CASES = [
    "arr_constant_interval7p5", "arr_constant_rate40",
    "arr_poisson_s1_r5", "arr_poisson_s1_r40", "arr_poisson_s1_r1000",
    "arr_poisson_s42_r5", "arr_poisson_s42_r40", "arr_poisson_s42_r1000",
    "arr_poisson_s987654321_r5", "arr_poisson_s987654321_r40", "arr_poisson_s987654321_r1000",
    "vllm_2workers_dp2", "vllm_kv_pressure_fifo", "vllm_kv_pressure_lifo", "vllm_max_num_seqs4",
    "vllm_no_prefix_caching", "vllm_poisson_polynomial", "vllm_prefix_reuse", "vllm_sla_e2e",
    "vllm_sla_ttft_itl", "vllm_speedup",
]


@pytest.mark.parametrize("name", SYNTHETIC_CASES)
def test_matches_reference_per_request(name):
    report, fixture = run_fixture(name)
    assert summary_mismatches(report.summary, fixture["summary"]) == []
    assert record_mismatches(report.per_request, fixture["per_request"]) == []


@pytest.mark.parametrize("name", ["arr_poisson_s1_r5", "arr_poisson_s42_r40",
                                  "arr_poisson_s987654321_r1000"])
def test_poisson_arrival_times_equal_the_reference(name):
    report, fixture = run_fixture(name)
    ours = sorted(r["arrival_time_ms"] for r in report.per_request)
    theirs = sorted(r["arrival_time_ms"] for r in fixture["per_request"])
    assert len(ours) == len(theirs) == 40
    assert all(abs(a - b) <= 1e-9 for a, b in zip(ours, theirs))
    assert ours[0] == 0.0 and len(set(ours)) == 40


@pytest.mark.parametrize("name", ["b1_poisson_fixed", "b2_concurrency_polynomial"])
def test_bench_payloads_match_the_reference(name):
    report, fixture = run_fixture(name)
    ref = fixture["summary"]
    ours = report.summary
    for key in ("num_requests", "completed_requests", "total_input_tokens",
                "total_output_tokens", "committed_prefill_tokens"):
        assert ours[key] == ref[key], key
    # the tolerances are 2% / 5% / 1%; we reproduce the reference to rounding noise
    assert summary_mismatches(ours, ref) == []


def test_fixture_cases_exercise_what_they_claim():
    """Guards the fixtures themselves: preemption, reuse and rejection really happen in them."""
    lifo = load_fixture("vllm_kv_pressure_lifo")["per_request"]
    assert sum(r["readmission_count"] for r in lifo) > 0
    reuse = load_fixture("vllm_prefix_reuse")["summary"]
    assert reuse["prefix_cache_reused_ratio"] > 0.4

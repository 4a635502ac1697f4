"""TensorRT-LLM GUARANTEED_NO_EVICT: whole-footprint reservation, no preemption, clamping."""

import json

import pytest

from aisimulate_core import run_replay
from reference import load_fixture, record_mismatches, run_fixture, summary_mismatches
from test_semantics_cases import bare_spec, req


@pytest.mark.parametrize("name", ["trtllm_kv_pressure", "trtllm_prefix_reuse",
                                  "trtllm_poisson_polynomial", "trtllm_full_cache_hit"])
def test_matches_reference(name):
    report, fixture = run_fixture(name)
    assert summary_mismatches(report.summary, fixture["summary"]) == []
    assert record_mismatches(report.per_request, fixture["per_request"]) == []


def test_reference_fixture_really_queues_instead_of_preempting():
    trt = load_fixture("trtllm_kv_pressure")["per_request"]
    vllm = load_fixture("vllm_kv_pressure_lifo")["per_request"]   # same load on vLLM
    assert sum(r["readmission_count"] for r in vllm) > 0
    assert sum(r["readmission_count"] for r in trt) == 0


def test_a_whole_cached_prompt_is_not_recomputed():
    """TensorRT-LLM reuses every cached block (vLLM recomputes the last one for its logits); the
    first token then comes from a decode step, as no prompt work happened in that pass."""
    rows = sorted(load_fixture("trtllm_full_cache_hit")["per_request"],
                  key=lambda r: r["arrival_time_ms"])
    assert [r["reused_input_tokens"] for r in rows] == [0, 0, 64, 48]
    spec = bare_spec([req(0, 64, 4), req(1, 64, 4, 100.0)], backend="trtllm")
    spec["requests"][1]["input_token_ids"] = spec["requests"][0]["input_token_ids"] = list(range(64))
    second = rows_of(spec)[1]
    assert (second["reused_input_tokens"], second["ttft_ms"]) == (64, 5.0)


def rows_of(spec):
    report = run_replay(json.dumps(spec))
    return sorted(report.per_request, key=lambda r: r["arrival_time_ms"])


def rows(spec):
    report = run_replay(json.dumps(spec))
    return sorted(report.per_request, key=lambda r: r["uuid"])


def test_admission_reserves_prompt_plus_output():
    # each request needs ceil((16 + 32) / 16) = 3 blocks through completion; 6 blocks hold two
    spec = bare_spec([req(i, 16, 32) for i in range(3)], blocks=6, backend="trtllm")
    first, second, third = rows(spec)
    assert first["first_admit_ms"] == second["first_admit_ms"] == 0.0
    # the third waits for a whole footprint to free, although its prompt alone would fit
    assert third["first_admit_ms"] == first["terminal_time_ms"]
    assert all(r["readmission_count"] == 0 for r in (first, second, third))


def test_vllm_admits_what_trtllm_holds_back():
    spec = bare_spec([req(i, 16, 32) for i in range(3)], blocks=6)
    assert [r["first_admit_ms"] for r in rows(spec)] == [0.0, 0.0, 0.0]


def test_output_is_clamped_to_the_pool():
    # 4 blocks of 16 tokens: a 40-token prompt leaves room for 24 generated tokens
    spec = bare_spec([req(0, 40, 100)], blocks=4, backend="trtllm")
    [row] = rows(spec)
    assert row["output_length"] == 24
    assert row["terminal_status"] == "completed"


def test_output_is_clamped_to_max_model_len():
    spec = bare_spec([req(0, 40, 100)], backend="trtllm", max_model_len=50)
    [row] = rows(spec)
    assert row["output_length"] == 10

"""The reference cases listed at the top of SEMANTICS.md, as bare specs with explicit requests."""

import json

import pytest

from aisimulate_core import run_replay


def bare_spec(requests, *, budget=8192, timing=None, blocks=1024, block_size=16, **rank):
    return {
        "version": 1,
        "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
        "engine": {"rank": {"backend": "vllm", "block_size": block_size, "num_gpu_blocks": blocks,
                            "max_num_batched_tokens": budget,
                            "timing_model": timing or {"type": "fixed", "prefill_ms": 10.0,
                                                       "decode_ms": 5.0}, **rank}},
        "requests": requests,
    }


def req(i, isl, osl, t=0.0, **extra):
    return {"id": f"r{i}", "arrival_time_ms": t, "input_tokens": isl, "output_tokens": osl,
            **extra}


def timings(spec):
    report = run_replay(json.dumps(spec))
    rows = sorted(report.per_request, key=lambda r: r["uuid"])
    return [(r["ttft_ms"], r["ttst_ms"], r["e2e_latency_ms"]) for r in rows]


def test_one_request():
    assert timings(bare_spec([req(0, 16, 4)])) == [(10.0, 5.0, 25.0)]


def test_three_requests_admitted_together():
    assert timings(bare_spec([req(i, 16, 4) for i in range(3)])) == [(10.0, 5.0, 25.0)] * 3


def test_single_output_token():
    assert timings(bare_spec([req(0, 16, 1)])) == [(10.0, None, 10.0)]


def test_chunked_prefill_mixes_with_decode():
    result = timings(bare_spec([req(0, 1000, 4), req(1, 1000, 4)], budget=512))
    assert result == [(20.0, 15.0, 55.0), (50.0, 5.0, 65.0)]


def test_polynomial_timing():
    [(ttft, ttst, _)] = timings(bare_spec([req(0, 1000, 4)], timing={"type": "polynomial"}))
    assert ttft == pytest.approx(4.209989e-7 * 1000**2 + 1.518344e-2 * 1000 + 16.50142, abs=1e-6)
    p = 1001 / 16384
    assert ttst == pytest.approx(-25.74 * p * p + 54.01 * p + 5.74, abs=1e-6)


def test_binding_record_carries_authored_identity():
    spec = bare_spec([req(0, 4, 2, input_token_ids=[1, 2, 3, 4], session_id="session-a",
                          turn_index=2, metadata={"caller_tag": "binding"})],
                     timing={"type": "fixed", "prefill_ms": 1.0, "decode_ms": 1.0},
                     blocks=16, block_size=4)
    spec["requests"][0]["id"] = "authored-id"
    [record] = run_replay(json.dumps(spec)).per_request
    assert record["request_id"] == "authored-id"
    assert record["session_id"] == "session-a"
    assert record["turn_index"] == 2
    assert record["metadata"] == {"caller_tag": "binding"}
    assert record["terminal_status"] == "completed"
    assert record["output_length"] == 2


def test_authored_prompts_share_prefix_blocks():
    shared = list(range(64))
    spec = bare_spec([req(0, 64, 2, input_token_ids=shared),
                      req(1, 80, 2, t=100.0, input_token_ids=shared + list(range(500, 516)))])
    rows = sorted(run_replay(json.dumps(spec)).per_request, key=lambda r: r["uuid"])
    assert [r["reused_input_tokens"] for r in rows] == [0, 64]


def test_prompt_at_max_model_len_is_rejected_at_pass_end():
    spec = bare_spec([req(0, 16, 4), req(1, 300, 4, t=3.0)], max_model_len=300)
    report = run_replay(json.dumps(spec))
    rejected = [r for r in report.per_request if r["terminal_status"] == "rejected"]
    assert [r["terminal_time_ms"] for r in rejected] == [15.0]
    assert report.summary["completed_requests"] == 1
    assert report.summary["num_requests"] == 2

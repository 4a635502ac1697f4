"""Invariants every report must satisfy, whatever the payload (SEMANTICS.md §4).

``check_report`` asserts them on a report dict (summary keys plus ``per_request``). Where
the reference's own definitions allow a value that looks wrong, the bound follows the
reference and the comment says why.
"""

from __future__ import annotations

import json
import math

from reference import HOST_KEYS
from strategies import requests_of_row

TERMINAL = ("completed", "rejected", "canceled", "failed")
# distributions built exactly (order statistics) and from a DDSketch (0.1 % relative error)
EXACT_DISTRIBUTIONS = ("ttft", "ttst", "tpot", "e2e_latency")
SKETCHED_DISTRIBUTIONS = ("itl",)
EPS = 1e-9


def comparable(report):
    """The report without the figures of the host (wall time and its rates)."""
    return {k: v for k, v in report.items() if k not in HOST_KEYS}


def expected_requests(payload, rows):
    """``(most, all_terminal)``: how many requests the payload can make arrive, and whether
    every arrived request must reach a terminal status (false under a time cutoff, where
    in-flight requests have no record)."""
    if "spec" not in payload:
        return len(payload["requests"]), payload.get("max_sim_time_ms") is None
    spec, traffic = payload["spec"], payload.get("traffic")
    cutoff = spec.get("max_sim_time_ms")
    if traffic is None:
        return len(spec.get("requests", ())), cutoff is None
    if traffic["source_type"] == "trace":
        cutoff = cutoff if cutoff is not None else traffic.get("max_sim_time_ms")
        return sum(requests_of_row(traffic, row) for row in rows), cutoff is None
    turns = traffic.get("turns_per_session", 4) if traffic["source_type"] == "synthetic-session" else 1
    return traffic["request_count"] * turns, cutoff is None


def _le(a, b, tolerance=EPS):
    return a <= b + tolerance * max(1.0, abs(b))


def check_record(r, full_output=True):
    """One per-request record. ``full_output``: a completed request emits every requested
    token (false when the output may be cut short)."""
    uuid = r["uuid"]
    assert r["terminal_status"] in TERMINAL, (uuid, r["terminal_status"])
    arrival, terminal = r["arrival_time_ms"], r["terminal_time_ms"]
    assert math.isfinite(arrival) and arrival >= 0, (uuid, arrival)
    assert math.isfinite(terminal) and _le(arrival, terminal), (uuid, arrival, terminal)
    if r["first_admit_ms"] is not None:
        assert _le(arrival, r["first_admit_ms"]) and _le(r["first_admit_ms"], terminal), uuid
    for key in ("ttft_ms", "ttst_ms", "e2e_latency_ms", "itl_ms"):
        value = r[key]
        assert value is None or (math.isfinite(value) and value >= 0), (uuid, key, value)
    if r["ttft_ms"] is not None and r["e2e_latency_ms"] is not None:
        assert _le(r["ttft_ms"], r["e2e_latency_ms"]), (uuid, r["ttft_ms"], r["e2e_latency_ms"])
    first, last = r["first_token_ms"], r["last_token_ms"]
    assert (first is None) == (last is None), uuid
    if first is not None:
        assert _le(first, last) and _le(last, terminal), (uuid, first, last, terminal)
    out, requested = r["output_length"], r["requested_output_length"]
    assert 0 <= out <= requested, (uuid, out, requested)
    if r["terminal_status"] == "completed" and r["admission_count"] > 0:
        assert out == requested or not full_output, (uuid, "completed with", out, "of", requested, "tokens")
        assert (first is not None) == (out > 0), (uuid, out, first)
    assert r["admission_count"] == len(r["admission_history"]), uuid
    assert 0 <= r["readmission_count"] <= max(0, r["admission_count"] - 1), uuid
    check_reuse(r)


def check_reuse(r):
    """Reuse within bounds. The reference reports the max reuse over admissions, and a
    preempted request that is readmitted can hit the blocks of the tokens it generated
    before the preemption (its prompt is then input plus those tokens): so the bound is
    ``input_length + output tokens generated before the last preemption``, at most
    ``input_length + output_length``. The first admission only sees the prompt."""
    uuid, length = r["uuid"], r["input_length"]
    history = r["admission_history"]
    for entry in history:
        assert 0 <= entry["reused_input_tokens"] <= length + r["output_length"], (uuid, entry)
    for key in ("reused_input_tokens", "decode_reused_input_tokens"):
        value = r[key]
        assert value is None or 0 <= value <= length + r["output_length"], (uuid, key, value)
    if history:
        assert history[0]["reused_input_tokens"] <= length, (uuid, history[0], length)
    if r["readmission_count"] == 0 and history:
        assert r["reused_input_tokens"] <= length, (uuid, r["reused_input_tokens"], length)


def check_distribution(summary, name, tolerance):
    keys = {field: summary[f"{field}_{name}_ms"] for field in
            ("mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std")}
    for field, value in keys.items():
        assert math.isfinite(value) and value >= 0, (name, field, value)
    low, high = keys["min"], keys["max"]
    ordered = [low, keys["median"], keys["p75"], keys["p90"], keys["p95"], keys["p99"], high]
    for a, b in zip(ordered, ordered[1:]):
        assert _le(a, b, tolerance), (name, ordered)
    assert _le(low, keys["mean"], tolerance) and _le(keys["mean"], high, tolerance), (name, keys)


def check_summary(summary, records):
    for key, value in summary.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert math.isfinite(value) and value >= 0, (key, value)
    for name in EXACT_DISTRIBUTIONS:
        check_distribution(summary, name, EPS)
    for name in SKETCHED_DISTRIBUTIONS:
        check_distribution(summary, name, 0.01)
    completed, tokens_in = summary["completed_requests"], summary["total_input_tokens"]
    assert summary["processed_tokens"] == tokens_in + summary["total_output_tokens"]
    assert summary["num_e2e_latency_samples"] == summary["num_ttft_samples"] <= completed
    assert summary["num_tpot_samples"] <= summary["num_ttft_samples"]
    assert summary.get("goodput_completed_requests", 0) <= completed
    assert 0 <= summary["first_admission_prefix_cache_reused_ratio"] <= 1 + EPS, summary
    if tokens_in:
        # a readmission can reuse generated tokens too (check_reuse)
        ceiling = (tokens_in + summary["total_output_tokens"]) / tokens_in
        assert 0 <= summary["prefix_cache_reused_ratio"] <= ceiling + EPS, summary
    if records is None:
        return
    done = [r for r in records if r["terminal_status"] == "completed" and r["admission_count"]]
    assert completed == len(done)
    assert tokens_in == sum(r["input_length"] for r in done)
    assert summary["total_output_tokens"] == sum(r["output_length"] for r in done)
    assert summary["num_ttft_samples"] == sum(r["first_token_ms"] is not None for r in done)
    if done:
        assert math.isclose(summary["duration_ms"], max(r["terminal_time_ms"] for r in done))


def check_report(report, payload=None, rows=None):
    """All invariants of ``report``; with the payload (and the trace rows it reads), the
    counts are checked against what the payload can produce too."""
    records = report.get("per_request")
    summary = {k: v for k, v in report.items() if k != "per_request"}
    check_summary(summary, records)
    if records is None:
        return
    uuids = [r["uuid"] for r in records]
    assert len(set(uuids)) == len(uuids), "a request has two terminal records"
    authored = [r["request_id"] for r in records if "request_id" in r]
    assert len(set(authored)) == len(authored), "an authored id has two terminal records"
    # a max_model_len cuts outputs short; so does TRT-LLM when the KV pool is full (the
    # reference completes such a request with the tokens it could emit)
    text = json.dumps(payload)
    full_output = payload is not None and "max_model_len" not in text and "trtllm" not in text
    for record in records:
        check_record(record, full_output)
    if payload is None or (rows is None and payload.get("traffic", {}).get("source_type") == "trace"):
        assert len(records) <= summary["num_requests"]
        return
    most, all_terminal = expected_requests(payload, rows)
    assert len(records) <= summary["num_requests"] <= most, (len(records), summary, most)
    if all_terminal:
        # every arrived request ends exactly once
        assert len(records) == summary["num_requests"], (len(records), summary["num_requests"])
        if summary["completed_requests"] == len(records):
            assert summary["num_requests"] == most, (summary["num_requests"], most)

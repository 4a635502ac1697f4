"""Disaggregated prefill/decode (SEMANTICS 3.3, vLLM and TensorRT-LLM, source-first handoff).

The recorded reference runs (tests/fixtures/reference/disagg_*.json) are matched exactly: the
summary at 1e-9 relative (worker-seconds and GPU-hours to the bit) and every per-request record,
lifecycle times included. The other tests spell out the rule each recorded case shows.
"""

import json
import math

import pytest

from aisimulate_core import Prompt, SimRequest, build_simulation, load_payload, run_replay
from aisimulate_core.engine.timing import PolynomialTiming, modeled_ms
from aisimulate_core.errors import ConfigError, NativeError, SimulationError
from reference import ROOT, load_fixture, run_fixture, summary_mismatches
from test_semantics_cases import bare_spec, req

CASES = [
    "disagg_lifecycle", "disagg_transfer_full_prompt", "disagg_transfer_destination_missing",
    "disagg_transfer_settings_of_prefill", "disagg_role_timing", "disagg_decode_first_token",
    "disagg_decode_preemption", "disagg_decode_preemption_poly", "disagg_arrival_at_boundary",
    "disagg_osl0", "disagg_decode_capacity_failure", "disagg_trtllm_pressure",
    "disagg_trtllm_destination_missing", "disagg_source_held_blocks_prefill",
    "disagg_activation_order", "disagg_dp_groups", "disagg_dp_groups_vllm",
    "disagg_poisson_pressure", "disagg_concurrency_trtllm",
]

LIFECYCLE = ("prefill_admit_ms", "source_held_ms", "destination_reserved_ms",
             "destination_activated_ms", "decode_admit_ms", "source_released_ms")
FIELDS = ("arrival_time_ms", "first_admit_ms", *LIFECYCLE, "first_token_ms", "last_token_ms",
          "terminal_time_ms", "ttft_ms", "ttst_ms", "e2e_latency_ms", "itl_ms", "input_length",
          "requested_output_length", "output_length", "reused_input_tokens",
          "decode_reused_input_tokens", "prefill_worker_idx", "decode_worker_idx",
          "prefill_route_overlap_tokens", "decode_route_overlap_tokens", "admission_count",
          "readmission_count", "terminal_status")


def facts(record):
    """A record's observable facts (the reference's uuids are random)."""
    values = [record[key] for key in FIELDS]
    values.append(tuple((a["pool"], a["at_ms"], a["reused_input_tokens"], a["is_readmission"])
                        for a in record["admission_history"]))
    values.append(tuple((r["pool"], r["logical_worker_id"], r["scheduler_id"], r["dp_rank"])
                        for r in record["routing_history"]))
    return tuple(values)


def rounded(value):
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, tuple):
        return tuple(map(rounded, value))
    return value


def same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(map(same, a, b))
    return a == b


def record_differences(ours, ref):
    assert len(ours) == len(ref)
    assert [list(r) for r in ours] == [list(r) for r in ref]  # keys, in the reference's order
    mine = sorted(map(facts, ours), key=lambda f: repr(rounded(f)))
    theirs = sorted(map(facts, ref), key=lambda f: repr(rounded(f)))
    return [(a, b) for a, b in zip(mine, theirs) if not same(a, b)]


def records(name):
    report, _ = run_fixture(name)
    return sorted(report.per_request, key=lambda r: (r["arrival_time_ms"], r["input_length"]))


def payload_dict(name):
    return json.loads((ROOT / "tests" / "fixtures" / "payloads" / f"{name}.json").read_text())


def run_dict(doc):
    cwd_relative = doc["traffic"].get("trace_path")
    if cwd_relative:
        doc["traffic"]["trace_path"] = str(ROOT / cwd_relative)
    return run_replay(doc)


# -- the recorded reference runs -----------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_matches_reference(name):
    report, fixture = run_fixture(name)
    assert summary_mismatches(report.summary, fixture["summary"]) == []
    assert record_differences(report.per_request, fixture["per_request"]) == []


@pytest.mark.parametrize("name", CASES)
def test_worker_seconds_and_gpu_hours_are_exact(name):
    """Each pool adds count × dt / 1000 at every clock advance, in time order: bit for bit."""
    report, fixture = run_fixture(name)
    for key in ("prefill_worker_seconds", "decode_worker_seconds", "gpu_hours",
                "prefill_gpus_per_worker", "decode_gpus_per_worker", "duration_ms"):
        assert report.summary[key] == fixture["summary"][key], key


def test_b5_bench_matches_the_reference():
    report, fixture = run_fixture("b5_disagg_1p2d")
    ours, ref = report.summary, fixture["summary"]
    assert summary_mismatches(ours, ref) == []
    for key in ("num_requests", "completed_requests", "total_input_tokens", "total_output_tokens",
                "committed_prefill_tokens", "prefill_worker_seconds", "decode_worker_seconds",
                "gpu_hours", "duration_ms", "min_ttft_ms"):
        assert ours[key] == ref[key], key
    # one prefill worker and two decode workers over the same clock
    assert ours["decode_worker_seconds"] == 2 * ours["prefill_worker_seconds"]
    assert ours["gpu_hours"] == (ours["prefill_worker_seconds"] + ours["decode_worker_seconds"]) / 3600


def test_fixtures_exercise_what_they_claim():
    pressure = load_fixture("disagg_poisson_pressure")
    assert sum(r["readmission_count"] for r in pressure["per_request"]) > 100
    assert pressure["summary"]["prefix_cache_reused_ratio"] > 0.5
    preempted = load_fixture("disagg_decode_preemption")
    assert preempted["summary"]["committed_prefill_tokens"] == 169  # 3 × 40 prompt + 49 recompute
    assert load_fixture("disagg_decode_stall")["error"].endswith(
        "effect-free zero-duration pass with 1 in-flight requests remaining")


# -- the rules -----------------------------------------------------------------------------------


def test_transfer_time_full_prompt():
    # 123457 bytes per token at 7.3 GB/s: every prompt token moves, in float ms, unrounded
    for r in records("disagg_transfer_full_prompt"):
        delay = float(r["input_length"]) * 123457.0 / (7.3 * 1e9) * 1000.0
        assert r["destination_reserved_ms"] == r["source_held_ms"]
        assert r["destination_activated_ms"] == r["destination_reserved_ms"] + delay
    first = records("disagg_transfer_full_prompt")[0]
    assert first["destination_activated_ms"] == 26.911917808219176  # 10 + 16.911917808219176


def test_transfer_time_destination_missing():
    # only the prompt blocks the decode rank misses move, in whole blocks of 16 tokens
    moved = [64, 16, 0, 16, 64]   # fresh; last block new; all cached; partial block; isl 63
    rows = records("disagg_transfer_destination_missing")
    for r, tokens in zip(rows, moved):
        delay = float(tokens) * 131072.0 / (64.0 * 1e9) * 1000.0
        assert r["destination_activated_ms"] == r["destination_reserved_ms"] + delay
    # the decode side's cache hits shorten the transfer but never count as reuse
    assert all(r["decode_reused_input_tokens"] == 0 for r in rows)
    assert [r["reused_input_tokens"] for r in rows] == [0, 48, 48, 48, 0]


def test_transfer_settings_come_from_the_prefill_role():
    # the decode role's destination_missing is ignored: 63 tokens move, not 64
    [r] = records("disagg_transfer_settings_of_prefill")
    assert r["destination_activated_ms"] - r["destination_reserved_ms"] == pytest.approx(0.129024, abs=1e-12)
    doc = payload_dict("disagg_transfer_settings_of_prefill")
    engine = doc["spec"]["engine"]
    engine["prefill"], engine["decode"] = engine["decode"], engine["prefill"]
    [r] = run_dict(doc).per_request
    # bandwidth only on the decode role: no transfer time
    assert r["destination_activated_ms"] == r["destination_reserved_ms"] == 10.0


def test_handoff_latency_stands_in_without_bandwidth():
    # not observable on the reference's Python binding (it has no argument for it)
    doc = payload_dict("disagg_osl0")
    doc["spec"]["topology"]["handoff_latency_ms"] = 2.5
    first = sorted(run_dict(doc).per_request, key=lambda r: r["arrival_time_ms"])[0]
    assert (first["destination_reserved_ms"], first["destination_activated_ms"]) == (10.0, 12.5)


@pytest.mark.parametrize("name", CASES)
def test_lifecycle_fields_are_in_order(name):
    for r in records(name):
        if r["terminal_status"] != "completed":
            continue
        times = [r[key] for key in LIFECYCLE[:5]]
        assert times == sorted(times), r
        assert r["source_released_ms"] >= r["destination_activated_ms"]
        assert r["first_admit_ms"] == r["prefill_admit_ms"]
        if r["first_token_ms"] is not None:
            assert r["first_token_ms"] > r["decode_admit_ms"]


def test_reservation_activation_and_release_wait_for_the_pass_in_flight():
    r0, r1, r2 = records("disagg_lifecycle")
    # the transfer lands at 13.2 while the prefill worker is busy (10-20): released at 20
    assert (r0["destination_activated_ms"], r0["source_released_ms"]) == (13.2, 20.0)
    # both held at 20 while the decode worker runs 13.2-20.2: one reservation per pass end
    assert r1["source_held_ms"] == r2["source_held_ms"] == 20.0
    assert (r1["destination_reserved_ms"], r2["destination_reserved_ms"]) == (20.2, 27.2)
    # a transfer done at 23.4 activates at the pass end 27.2
    assert r1["destination_activated_ms"] == 27.2


def test_held_sources_keep_their_prefill_blocks():
    # a 5-block prefill pool holds one 64-token prompt: the next waits for the release at 138
    first, second = records("disagg_source_held_blocks_prefill")
    assert first["source_released_ms"] == 138.0
    assert second["prefill_admit_ms"] == 138.0


def test_decode_role_charges_the_first_token_as_decode():
    # fixed 10 ms prefill; the first token is a polynomial decode step over the 500-token prompt
    first = records("disagg_decode_first_token")[0]
    step = modeled_ms(PolynomialTiming().decode_ms(1, 500, 500, 64 * 16), 1.0)
    assert first["first_token_ms"] == 10.0 + step == 35.975176


def test_per_role_timing_models():
    # polynomial prefill (no decode time on the prefill rank), fixed 5 ms decode steps
    rows = records("disagg_role_timing")
    assert rows[0]["source_held_ms"] == modeled_ms(PolynomialTiming().prefill_ms(1, 500, 0), 1.0)
    assert all(r["first_token_ms"] - r["decode_admit_ms"] == pytest.approx(5.0) for r in rows)
    assert all(r["ttst_ms"] == pytest.approx(5.0) for r in rows)


def test_decode_preemption_recomputes_locally():
    rows = records("disagg_decode_preemption_poly")
    history = rows[1]["admission_history"]
    assert [(a["pool"], a["is_readmission"]) for a in history] == [
        ("prefill", False), ("decode", False), ("decode", True)]
    # the summary's reuse takes the largest admission of either pool; the record the prefill's
    assert (rows[1]["reused_input_tokens"], rows[1]["decode_reused_input_tokens"]) == (0, 48)
    assert load_fixture("disagg_decode_preemption_poly")["summary"]["prefix_cache_reused_ratio"] == 0.6


def test_activated_requests_wait_in_accept_order():
    # 16 decode blocks; at 1520 the request accepted at 70 (held then) is activated while one
    # accepted later, preempted, waits at the head of the queue: it goes in front and starts
    rows = {(r["arrival_time_ms"], r["input_length"]): r for r in records("disagg_activation_order")}
    early, late = rows[(50.0, 86)], rows[(60.0, 19)]
    assert early["source_held_ms"] < late["source_held_ms"]
    assert late["readmission_count"] == 2
    assert early["destination_activated_ms"] == early["decode_admit_ms"] == 1520.0
    assert late["admission_history"][3]["at_ms"] == 1535.0  # prefill, decode, decode, decode


def test_attention_dp_ranks_complete_in_rank_order():
    # one decode worker of two DP ranks: the two sources activated at its pass end 115.498 are
    # released in rank order (rank 0's first), which decides what the 8-block prefill pool keeps
    rows = {(r["arrival_time_ms"], r["input_length"]): r for r in records("disagg_dp_groups")}
    first, second = rows[(5.0, 66)], rows[(5.0, 47)]
    assert (first["decode_worker_idx"], second["decode_worker_idx"]) == (0, 1)
    assert first["source_released_ms"] == second["source_released_ms"]
    assert rows[(28.0, 20)]["reused_input_tokens"] == 16  # block [3] of the 47-token prompt


def test_prefill_dp_rank_pins_the_prefill_scheduler():
    spec = disaggregated(bare_spec([req(0, 32, 2, prefill_dp_rank=1), req(1, 32, 2, 1.0, prefill_dp_rank=0),
                                    req(2, 32, 2, 2.0, prefill_dp_rank=1)]))
    spec["engine"]["prefill"] = {"dp_size": 2, "rank": dict(spec["engine"]["rank"])}
    rows = sorted(run_replay(json.dumps(spec)).per_request, key=lambda r: r["arrival_time_ms"])
    assert [r["prefill_worker_idx"] for r in rows] == [1, 0, 1]
    assert [r["decode_worker_idx"] for r in rows] == [0, 0, 0]


def test_decode_capacity_failure():
    failed, served = records("disagg_decode_capacity_failure")
    assert failed["terminal_status"] == "failed"
    assert failed["terminal_time_ms"] == failed["source_held_ms"] == 10.0
    assert failed["decode_worker_idx"] is None and failed["source_released_ms"] is None
    assert [r["pool"] for r in failed["routing_history"]] == ["prefill", "decode"]
    # the decode cursor moved on: the next request goes to the other decode worker
    assert served["decode_worker_idx"] == 1 and served["terminal_status"] == "completed"


def test_trtllm_reserves_to_completion_and_moves_whole_prompts():
    r0, r1, r2 = records("disagg_trtllm_pressure")
    # 10 decode blocks, each request needs 5 through completion: the third waits for the first
    assert r2["source_held_ms"] == 20.0
    assert r2["destination_reserved_ms"] == r0["terminal_time_ms"] == 160.0
    cached = records("disagg_trtllm_destination_missing")[1]
    # a full cache hit on the prefill side is not recomputed (held at its arrival), yet all
    # 64 tokens move: TensorRT-LLM reserves fresh blocks only
    assert (cached["prefill_admit_ms"], cached["source_held_ms"], cached["reused_input_tokens"]) == (
        100.0, 100.0, 64)
    assert cached["destination_activated_ms"] - cached["destination_reserved_ms"] == pytest.approx(0.131072)


def test_a_stall_is_an_error_naming_the_request():
    with pytest.raises(SimulationError) as info:
        run_fixture("disagg_decode_stall")
    assert str(info.value) == (
        "request #1 can never be scheduled on decode worker 0: $.spec.engine.decode.rank."
        "num_gpu_blocks: its 81 tokens need more than the 5 KV blocks of 16 tokens of a rank; the "
        "disaggregated replay cannot progress with 1 requests in flight")


def test_pool_errors_and_stall_messages_name_the_role_that_was_written(monkeypatch):
    monkeypatch.chdir(ROOT)  # the payload's trace path is relative to the project root
    payload = json.loads((ROOT / load_fixture("disagg_decode_stall")["payload"]).read_text())
    payload["spec"]["engine"]["decode"]["dp_size"] = 2  # the prefill role is $.spec.engine
    payload["spec"]["topology"]["decode"]["initial_workers"] = 2
    sim = build_simulation(load_payload(json.dumps(payload)))
    assert {r.config_path for w in sim.prefill_workers for r in w.ranks} == {"$.spec.engine.rank"}
    assert {r.config_path for w in sim.decode_workers for r in w.ranks} == {
        "$.spec.engine.decode.rank"}
    with pytest.raises(NativeError) as info:
        sim.decode_workers[1].ranks[1].pool.release(999)
    assert str(info.value).startswith(
        "BlockPool[$.spec.engine.decode.rank.num_gpu_blocks, worker 1 dp rank 1].release(seq=999)")


def disaggregated(spec):
    spec["topology"] = {"kind": "disaggregated", "prefill": {"initial_workers": 1},
                        "decode": {"initial_workers": 1}}
    return spec


def test_steppable_api():
    events = []
    payload = load_payload(json.dumps(disaggregated(bare_spec([req(0, 64, 2)]))))
    sim = build_simulation(payload, on_event=lambda kind, t, r: events.append((kind, t)))
    sim.run_until(12.0)
    assert sim.now_ms == 12.0
    late = SimRequest(0, Prompt.from_tokens(range(1000, 1016)), 2, 0.0, request_id="late")
    sim.submit(late)
    sim.run()
    assert sim.is_done()
    report = sim.report()
    rows = {r["request_id"]: r for r in report.per_request}
    # r0: prefill 0-10, decode 10-15-20; late: prefill 12-22, decode 22-27-32
    assert (rows["r0"]["first_token_ms"], rows["r0"]["terminal_time_ms"]) == (15.0, 20.0)
    assert (rows["late"]["arrival_time_ms"], rows["late"]["source_held_ms"]) == (12.0, 22.0)
    assert (rows["late"]["first_token_ms"], rows["late"]["terminal_time_ms"]) == (27.0, 32.0)
    assert events == [("arrival", 0.0), ("arrival", 12.0), ("completed", 20.0), ("completed", 32.0)]
    assert report.summary["prefill_worker_seconds"] == report.summary["decode_worker_seconds"] == 0.032


@pytest.mark.parametrize("backend", ["vllm", "trtllm"])
def test_the_roles_fall_back_to_the_aggregated_rank(backend):
    spec = disaggregated(bare_spec([req(0, 64, 3), req(1, 40, 2, 1.0)], backend=backend))
    explicit = json.loads(json.dumps(spec))
    explicit["engine"]["prefill"] = {"rank": {**spec["engine"]["rank"], "worker_type": "prefill"}}
    explicit["engine"]["decode"] = {"rank": dict(spec["engine"]["rank"])}

    def rows(doc):
        return [{k: v for k, v in r.items() if k != "uuid"}
                for r in run_replay(json.dumps(doc)).per_request]

    assert rows(spec) == rows(explicit)
    assert rows(spec)[0]["decode_admit_ms"] == 10.0


def test_mixed_backends_are_rejected():
    doc = payload_dict("disagg_osl0")
    doc["spec"]["engine"]["decode"] = {"rank": {**doc["spec"]["engine"]["rank"], "backend": "trtllm"}}
    with pytest.raises(ConfigError) as info:
        run_dict(doc)
    assert str(info.value) == ("$.spec.engine.decode.rank.backend: must match the prefill role's "
                               "backend \"vllm\" in a disaggregated topology, got \"trtllm\"")


def test_sglang_runs_disaggregated():
    """SGLang P/D (destination-first, engine/sglang_roles.py): every request completes with its
    handoff times (the reference cases are in tests/test_features_sglang.py)."""
    doc = payload_dict("disagg_osl0")
    doc["spec"]["engine"]["rank"]["backend"] = "sglang"
    doc["spec"]["engine"]["rank"]["block_size"] = 16
    report = run_dict(doc)
    assert report.summary["completed_requests"] == report.summary["num_requests"] > 0
    assert all(r["destination_reserved_ms"] is not None for r in report.per_request)


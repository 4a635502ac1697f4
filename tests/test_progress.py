"""Progress or a clear stop: no pass may repeat forever without time or effect (issue 8, item 1).

The reference hangs on the two SGLang livelocks (its clock stops; fixtures ``repro_hang_*``
record where, watched through its telemetry) and aborts on the ``max_prefill_tokens`` stall;
we raise ``SimulationError`` at the same simulated time, naming the limit and its JSON path.
"""

from __future__ import annotations

import json
import math

import pytest

from aisimulate_core import build_simulation, load_payload
from aisimulate_core.engine.timing import FixedTiming, StepTimer
from aisimulate_core.errors import SimulationError
from aisimulate_core.runtime.simulation import LIVELOCK_PASSES
from reference import ROOT, load_fixture, record_mismatches, run_fixture, summary_mismatches


def _simulation(name, on_event=None):
    fixture = load_fixture(name)
    payload = load_payload((ROOT / fixture["payload"]).read_text())
    return build_simulation(payload, on_event=on_event), fixture


def _run_to_error(name):
    """Run a recorded case to its SimulationError; returns (message, clock, completed, fixture)."""
    completed = []
    sim, fixture = _simulation(name, lambda kind, t, r: completed.append(t)
                               if kind == "completed" else None)
    with pytest.raises(SimulationError) as info:
        sim.run()
    return str(info.value), sim.now_ms, len(completed), fixture


@pytest.mark.parametrize("name", ["repro_hang_sglang_chunked_prefill", "repro_hang_sglang_clip",
                                  "hang_sglang_clipped_pair"])
def test_a_livelock_stops_where_the_reference_clock_stops(name):
    message, clock, completed, fixture = _run_to_error(name)
    hang = fixture["hang"]
    # the reference's last telemetry sample came before its clock stopped, the next never came
    assert hang["last_sample_ms"] < clock <= hang["last_sample_ms"] + hang["sample_interval_ms"]
    assert completed == hang["completed_before"]
    assert f"stuck at {clock} ms" in message and "\n" not in message


def test_the_chunked_prefill_livelock_names_the_pool_and_the_chunked_prompt():
    message, _, _, _ = _run_to_error("repro_hang_sglang_chunked_prefill")
    assert message == (
        "$.spec.engine.rank.num_gpu_blocks: 334 blocks of 4 tokens (1336 KV tokens per rank) is "
        "full and request #12, the only one running, needs another 4-token page that nothing "
        "will free: request #12 holds 760; request #13 holds 576 of the 741 tokens it is "
        "prefilling (a request part way through its prefill, "
        "$.spec.engine.rank.sglang.chunked_prefill_size = 352, is never retracted) (worker 0 "
        "dp rank 0, stuck at 2945.0 ms)")


def test_the_clip_livelock_names_the_pool_and_the_clipped_reserve():
    message, _, _, _ = _run_to_error("repro_hang_sglang_clip")
    assert message.startswith(
        "$.spec.engine.rank.num_gpu_blocks: 16 blocks of 1 tokens (16 KV tokens per rank) "
        "cannot hold request #1 (10 prompt + 10 output tokens, 19 KV tokens at its end): "
        "admission reserved only 1 output tokens ($.spec.engine.rank.sglang.clip_max_new_tokens "
        "= 1)")


def test_a_prefill_budget_stall_blames_max_prefill_tokens_not_the_pool():
    message, clock, _, fixture = _run_to_error("repro_sglang_max_prefill_stall")
    assert "effect-free zero-duration pass" in fixture["error"]   # the reference aborts too
    assert message == ("$.spec.engine.rank.sglang.max_prefill_tokens: 100 < prompt of request "
                       "#1 (200 tokens); request #1 can never be scheduled")
    assert clock == 0.0


def _sglang(rows, **rank):
    engine = {"backend": "sglang", "num_gpu_blocks": 4096,
              "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 5.0}}
    engine.update(rank)
    requests = [{"id": rid, "arrival_time_ms": 0.0, "input_tokens": isl, "output_tokens": osl}
                for rid, isl, osl in rows]
    return {"version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
            "engine": {"rank": engine}, "requests": requests}


def test_a_chunk_smaller_than_a_page_names_chunked_prefill_size():
    # attention DP splits the chunk budget over the group: 16 / 2 is less than a 16-token page
    spec = _sglang([("r1", 64, 4)], block_size=16, sglang={"chunked_prefill_size": 16})
    spec["engine"]["dp_size"] = 2
    with pytest.raises(SimulationError) as info:
        build_simulation(load_payload(json.dumps(spec))).run()
    assert str(info.value) == (
        "$.spec.engine.rank.sglang.chunked_prefill_size: 8 (16 split over the 2 ranks of a DP "
        "group) < one KV page of 16 tokens ($.spec.engine.rank.block_size), so the prompt of "
        "request 'r1' (64 tokens) never gets a chunk; request 'r1' can never be scheduled")


def test_a_prompt_beyond_the_pool_names_num_gpu_blocks():
    spec = _sglang([("r1", 95, 10)], num_gpu_blocks=100)
    with pytest.raises(SimulationError) as info:
        build_simulation(load_payload(json.dumps(spec))).run()
    assert str(info.value) == (
        "$.spec.engine.rank.num_gpu_blocks: 100 blocks of 1 tokens (100 KV tokens per rank) "
        "cannot hold request 'r1': 95 prompt tokens plus an output reserve of 10 (at most "
        "$.spec.engine.rank.sglang.clip_max_new_tokens = 4096); request 'r1' can never be "
        "scheduled")


def test_vllm_stall_names_its_json_path():
    spec = _sglang([("r1", 800, 4)], backend="vllm", block_size=16, num_gpu_blocks=1024,
                   enable_chunked_prefill=False, max_num_batched_tokens=512)
    with pytest.raises(SimulationError) as info:
        build_simulation(load_payload(json.dumps(spec))).run()
    assert str(info.value) == (
        "$.spec.engine.rank.max_num_batched_tokens: its prompt of 800 tokens exceeds "
        "max_num_batched_tokens 512 and chunked prefill is disabled; request 'r1' can never be "
        "scheduled")


def test_the_livelock_guard_stops_what_the_engine_does_not_detect():
    """With its own fixed-point detection defeated (the admission ratio can never reach its
    floor), the clip livelock spins at 35 ms; the event loop's guard stops it and says where."""
    sim, _ = _simulation("repro_hang_sglang_clip")
    sim.workers[0].ranks[0].ratio.min = -math.inf
    with pytest.raises(SimulationError) as info:
        sim.run()
    assert str(info.value) == (
        f"worker 0 dp rank 0 cannot progress at 35.0 ms: {LIVELOCK_PASSES} passes in a row took "
        "no time and changed nothing (the livelock limit); requests #1; 0 of 16 KV tokens free")


def test_zero_time_passes_that_progress_are_not_a_livelock():
    # zero-cost timing: the whole run happens at t = 0, many more passes than the guard's limit
    spec = _sglang([("r1", 16, LIVELOCK_PASSES + 50)])
    spec["engine"]["rank"]["timing_model"] = {"type": "fixed", "prefill_ms": 0.0, "decode_ms": 0.0}
    spec["engine"]["rank"]["backend"] = "vllm"
    spec["engine"]["rank"]["block_size"] = 16
    sim = build_simulation(load_payload(json.dumps(spec)))
    sim.run()
    assert sim.report().summary["completed_requests"] == 1 and sim.now_ms == 0.0


@pytest.mark.parametrize("phase, timer", [
    ("prefill", StepTimer(FixedTiming(1e308, 5.0), name="timing 'fixed'")),
    ("prefill", StepTimer(FixedTiming(10.0, 5.0), speedup_ratio=1e-320, name="timing 'fixed'")),
    ("decode", StepTimer(FixedTiming(10.0, 1e300), name="timing 'fixed'")),
])
def test_a_pass_time_beyond_the_reference_duration_is_an_error(phase, timer):
    """The reference refuses durations of 2^64 s or more (fixtures repro_prefill_ms_1e308 and
    repro_speedup_ratio_denormal); the timer says which model and value, not OverflowError."""
    with pytest.raises(SimulationError) as info:
        timer.prefill(1, 64, 0) if phase == "prefill" else timer.decode(1, 64, 64, 1024)
    message = str(info.value)
    assert message.startswith(f"timing 'fixed': {phase} time ") and "out of range" in message
    for name in ("repro_prefill_ms_1e308", "repro_speedup_ratio_denormal"):
        assert "out of range" in load_fixture(name)["error"]


@pytest.mark.parametrize("name", ["stall_vllm_parked_cutoff", "stall_disagg_prefill_parked_cutoff"])
def test_a_head_that_never_starts_parks_its_worker_until_the_time_limit(name):
    """vLLM: nothing runs on worker 0 and its head exceeds the non-chunked budget; the reference
    runs the other work on to max_sim_time_ms and reports, the stranded request in flight."""
    report, fixture = run_fixture(name)
    assert summary_mismatches(report.summary, fixture["summary"]) == []
    assert record_mismatches(report.per_request, fixture["per_request"]) == []
    assert report.summary["num_requests"] == 2 and report.summary["completed_requests"] == 0


@pytest.mark.parametrize("name, message", [
    ("stall_vllm_parked_drained",
     "$.spec.engine.rank.max_num_batched_tokens: its prompt of 208 tokens exceeds "
     "max_num_batched_tokens 160 and chunked prefill is disabled; request #2 can never be "
     "scheduled"),
    ("stall_disagg_prefill_parked_drained",
     "request #2 can never be scheduled on prefill worker 0: $.spec.engine.rank."
     "max_num_batched_tokens: its prompt of 208 tokens exceeds max_num_batched_tokens 160 and "
     "chunked prefill is disabled; the disaggregated replay cannot progress with 1 requests in "
     "flight"),
])
def test_a_parked_worker_is_an_error_once_nothing_else_can_happen(name, message):
    completed = []
    sim, fixture = _simulation(name, lambda kind, t, r: completed.append(t)
                               if kind == "completed" else None)
    with pytest.raises(SimulationError) as info:
        sim.run()
    assert "effect-free zero-duration pass with 1 in-flight" in fixture["error"]
    assert str(info.value) == message
    assert len(completed) == 1 and completed[0] > 1000.0   # the other request ran to its end


def test_sglang_does_not_park_a_worker_whose_head_never_starts():
    # the same load on SGLang: the reference aborts at once, before the 100 ms limit
    sim, fixture = _simulation("stall_sglang_not_parked")
    with pytest.raises(SimulationError, match="max_prefill_tokens: 160 < prompt of request #2"):
        sim.run()
    assert "effect-free zero-duration pass" in fixture["error"]
    assert sim.now_ms == 1.0


@pytest.mark.parametrize("name", ["cutoff_prefill_in_flight_vllm", "cutoff_prefill_in_flight_sglang"])
def test_a_pass_cut_by_the_time_limit_computes_no_prompt_tokens(name):
    """A pass still in flight at max_sim_time_ms never completes: the reference leaves its
    prompt work out of committed_prefill_tokens (found by a differential fuzz run)."""
    report, fixture = run_fixture(name)
    assert summary_mismatches(report.summary, fixture["summary"]) == []
    assert record_mismatches(report.per_request, fixture["per_request"]) == []


def test_a_settled_admission_ratio_counts_as_its_floor():
    """schedule_conservativeness 0: the ratio never decays after a retraction set it to 1, so
    the starved pass repeats at once (the property test found this one behind the guard)."""
    message, clock, _, _ = _run_to_error("hang_sglang_clipped_pair")
    assert "livelock limit" not in message
    assert message.startswith("$.spec.engine.rank.num_gpu_blocks: 38 blocks of 1 tokens")
    assert "request #1 holds 16 of the 19 tokens it is prefilling" in message



@pytest.mark.parametrize("name", ["disagg_decode_recompute_zero_time",
                                  "disagg_decode_recompute_zero_time_1w",
                                  "disagg_zero_time_prefill_chunks"])
def test_zero_time_chunks_are_progress_in_a_disaggregated_replay(name):
    """A decode-role recompute after preemption (free) or a zero-time prefill computes its
    tokens chunk by chunk at one time; the reference goes on until it is done, so must we
    (the property test found these stranded)."""
    report, fixture = run_fixture(name)
    assert summary_mismatches(report.summary, fixture["summary"]) == []
    assert record_mismatches(report.per_request, fixture["per_request"]) == []
    assert report.summary["completed_requests"] == report.summary["num_requests"]

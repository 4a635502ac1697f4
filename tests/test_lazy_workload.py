"""The workload is made as the clock reaches it (issue 8, item 3), with the same results.

Synthetic arrivals are drawn one at a time and sessions made when their first turn is ready;
the whole-trace construction they replace is kept here (``eager_trace``) as the statement of
what the draws must equal. Prompts know their length before their runs exist, so a request
rejected on its length never costs memory in proportion to it (fixtures recorded on the
reference: ``reject_*``; a 10^9-token prompt, the issue's case, is now refused by the length bound).
"""

import json
import math
import tracemalloc
from array import array

import pytest

from aisimulate_core import Prompt, SimRequest, build_simulation, load_payload, run_replay
from aisimulate_core.spec import resolve_synthetic
from aisimulate_core.workload.prompt import IdRanges
from aisimulate_core.workload.rng import StdRng
from aisimulate_core.workload.sessions import SessionDriver
from aisimulate_core.workload.synthetic import (SHAPE_SEED, SyntheticSessions, first_arrivals,
                                                synthetic_driver)
from aisimulate_core.workload.trace import Session, Trace, Turn
from reference import ROOT, record_mismatches, run_fixture, summary_mismatches


def synthetic_payload(**traffic):
    return {
        "spec": {"version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
                 "engine": {"rank": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 4096,
                                     "timing_model": {"type": "fixed", "prefill_ms": 10.0,
                                                      "decode_ms": 5.0}}},
                 "record_per_request": False},
        "traffic": {"source_type": "synthetic", "isl": 100, "osl": 4, **traffic},
    }


def resolved(**traffic):
    payload = load_payload(json.dumps(synthetic_payload(**traffic)))
    return resolve_synthetic(payload.traffic, payload.spec)


def load_payload_dict(path):
    return json.loads((ROOT / path).read_text())


def eager_trace(res):
    """The synthetic trace built whole, as the driver did before it was lazy."""
    block = res.block_size
    rng = StdRng(SHAPE_SEED)
    if res.arrival_kind == "poisson_qps":
        arrivals = StdRng(res.arrival_seed).poisson_arrivals(res.session_count,
                                                             1000.0 / res.arrival_qps)
    else:
        arrivals = [0.0] * res.session_count
    n_blocks = -(-res.isl // block)
    grouped = res.shared_prefix_ratio > 0 and res.num_prefix_groups > 0
    shared = min(n_blocks, int(n_blocks * res.shared_prefix_ratio + 0.5)) if grouped else 0
    fresh = res.num_prefix_groups * shared
    own = n_blocks - shared
    sessions = []
    for i in range(res.session_count):
        prefix = array("I")
        if grouped:
            base = rng.gen_range(0, res.num_prefix_groups) * shared
            prefix = array("I", range(base, base + shared))
        turns = []
        for t in range(res.turns):
            turns.append(Turn(res.isl, res.osl, prefix + array("I", range(fresh, fresh + own)),
                              (res.inter_turn_delay_ms or 0.0) if t else 0.0))
            fresh += own
        sessions.append(Session(f"session_{i}", arrivals[i], turns))
    return Trace(block, sessions)


def drain(driver):
    """Every request the driver hands out, each completing 1 ms after it is ready."""
    out = []
    t = 0.0
    while not driver.is_drained():
        t = max(t, driver.next_ready_ms())
        for r in driver.pop_ready(t, 1 << 30):
            out.append((r.session_id, r.turn_index, t, r.max_output, r.prompt_len,
                        r.prompt.values.tolist(), r.prompt.lengths.tolist()))
            r.generated = r.max_output
            driver.on_terminal(r, t + 1.0, "completed")
    return out


def test_lazy_poisson_arrivals_are_the_batch_schedule_bit_for_bit():
    res = resolved(load_type="poisson", request_rate=250.0, request_count=3000, arrival_seed=7)
    lazy = list(first_arrivals(res))
    assert lazy == StdRng(7).poisson_arrivals(3000, 1000.0 / 250.0)
    assert lazy[0] == 0.0 and lazy == sorted(lazy)


@pytest.mark.parametrize("traffic", [
    dict(load_type="poisson", request_rate=100.0, request_count=400, arrival_seed=3,
         shared_prefix_ratio=0.5, num_prefix_groups=5),
    dict(load_type="concurrency", concurrency=7, request_count=300),
    dict(source_type="synthetic-session", load_type="concurrency", concurrency=4,
         request_count=60, turns_per_session=3, inter_turn_delay_ms=2.5,
         shared_prefix_ratio=0.25, num_prefix_groups=3),
])
def test_lazy_sessions_hand_out_the_requests_of_the_whole_trace(traffic):
    res = resolved(**traffic)
    lazy = synthetic_driver(res)
    eager = SessionDriver(eager_trace(res), max_sessions=res.max_in_flight,
                          session_metadata=lazy.session_metadata)
    assert lazy.total == eager.total
    assert drain(lazy) == drain(eager)


def test_sessions_exist_only_while_in_flight():
    # (sessions of two turns: one-turn traffic takes OneTurnDriver, which keeps no sessions)
    payload = synthetic_payload(load_type="poisson", request_rate=400.0, request_count=3000,
                                shared_prefix_ratio=0.5, num_prefix_groups=4,
                                source_type="synthetic-session", turns_per_session=2)
    sim = build_simulation(load_payload(json.dumps(payload)))
    driver = sim.driver
    sessions = driver.sessions
    assert isinstance(sessions, SyntheticSessions) and not sessions._live
    most = [0, 0]

    def watch(kind, t, request):
        most[0] = max(most[0], len(sessions._live))
        most[1] = max(most[1], len(driver._heap))

    sim.on_event = watch
    sim.run()
    assert sim.report().summary["completed_requests"] == 6000
    # the sessions in flight at a time, never the 3000; the heap holds their next turns and
    # one start
    assert 0 < most[0] <= 100 and most[1] <= most[0] + 1
    assert not sessions._live


def test_a_prompt_from_hash_ids_has_its_length_before_its_runs():
    huge = Prompt.from_hash_ids(IdRanges(((0, 16), (1000, 62_500_000))), 10**9, 16)
    assert huge.length == 10**9 and huge._values is None
    small = Prompt.from_hash_ids(IdRanges(((5, 2), (90, 3))), 70, 16)
    eager = Prompt.from_hash_ids(array("I", [5, 6, 90, 91, 92]), 70, 16)
    assert small.values.tolist() == eager.values.tolist() == [5, 6, 90, 91, 92]
    assert small.lengths.tolist() == eager.lengths.tolist() == [16, 16, 16, 16, 6]
    assert small.block_hashes(16) == eager.block_hashes(16)
    assert IdRanges(((5, 2), (90, 3)))[:3].tolist() == [5, 6, 90]


def traced_peak(run):
    tracemalloc.start()
    try:
        out = run()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_a_prompt_longer_than_max_model_len_is_rejected_without_its_tokens(backend):
    name = f"reject_{backend}_max_model_len_isl16m"
    (report, fixture), peak = traced_peak(lambda: run_fixture(name))
    assert summary_mismatches(report.summary, fixture["summary"]) == []
    assert record_mismatches(report.per_request, fixture["per_request"]) == []
    assert [r["terminal_status"] for r in report.per_request] == ["rejected"] * 4
    small = json.loads(json.dumps(load_payload_dict(fixture["payload"])))
    small["traffic"]["isl"] = 100
    _, small_peak = traced_peak(lambda: run_replay(small))
    # four prompts of 2^24 tokens, 1M hash ids each: 32 MB more when they were built up front
    assert peak - small_peak < 2 << 20


@pytest.mark.parametrize("name", ["reject_vllm_over_capacity_isl1e7",
                                  "reject_trtllm_over_capacity_isl1e7"])
def test_a_prompt_larger_than_the_kv_pool_is_rejected_as_the_reference_does(name):
    report, fixture = run_fixture(name)
    assert summary_mismatches(report.summary, fixture["summary"]) == []
    assert record_mismatches(report.per_request, fixture["per_request"]) == []


def test_submit_during_a_synthetic_run_is_not_a_driver_turn():
    payload = synthetic_payload(load_type="concurrency", concurrency=2, request_count=4)
    payload["spec"]["record_per_request"] = True
    sim = build_simulation(load_payload(json.dumps(payload)))
    sim.run_until(12.0)
    sim.submit(SimRequest(0, Prompt.from_tokens(range(1000, 1016)), 2, 0.0, request_id="late"))
    sim.run()
    report = sim.report()
    assert report.summary["completed_requests"] == 5
    assert [r["request_id"] for r in report.per_request if "request_id" in r] == ["late"]
    assert math.isinf(sim.driver.next_ready_ms())

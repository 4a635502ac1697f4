"""``Simulation.submit``: an embedder's request enters now, idle or busy, before ``run`` or
during a traffic-driven run, aggregated or disaggregated (issue 8, item 7)."""

from __future__ import annotations

import json
import os

import pytest

from aisimulate_core import Prompt, SimRequest, build_simulation, load_payload
from aisimulate_core.errors import SimulationError
from reference import ROOT, load_fixture
from test_semantics_cases import bare_spec, req


def _request(seed, isl=16, osl=4, rid=None):
    return SimRequest(0, Prompt.from_tokens(range(1000 * seed, 1000 * seed + isl)), osl, 0.0,
                      request_id=rid)


def _disaggregated(spec):
    spec["topology"] = {"kind": "disaggregated", "prefill": {"initial_workers": 1},
                        "decode": {"initial_workers": 1}}
    return spec


def _rows(sim):
    return {r.get("request_id") or r["uuid"]: r for r in sim.report().per_request}


@pytest.mark.parametrize("topology", ["aggregated", "disaggregated"])
def test_submit_on_an_idle_simulation_runs_the_request(topology):
    spec = bare_spec([req(0, 16, 4)])
    if topology == "disaggregated":
        _disaggregated(spec)
    sim = build_simulation(load_payload(json.dumps(spec)))
    sim.run()
    idle_at = sim.now_ms
    sim.submit(_request(1, rid="late"))
    sim.run()
    late = _rows(sim)["late"]
    assert late["arrival_time_ms"] == idle_at and late["terminal_status"] == "completed"
    # it starts at once: prefill 10 ms, then 3 decode steps of 5 ms (disaggregated: the
    # prefill side's first token, then 4 decode steps on the decode side)
    assert late["e2e_latency_ms"] == (25.0 if topology == "aggregated" else 30.0)
    assert sim.report().summary["completed_requests"] == 2


@pytest.mark.parametrize("topology", ["aggregated", "disaggregated"])
def test_submit_before_run_arrives_at_time_zero(topology):
    spec = bare_spec([req(0, 16, 4, 100.0)])
    if topology == "disaggregated":
        _disaggregated(spec)
    sim = build_simulation(load_payload(json.dumps(spec)))
    sim.submit(_request(1, rid="early"))
    sim.run()
    rows = _rows(sim)
    # aggregated: the prefill's first token; disaggregated: the decode side's first step
    first_token = 10.0 if topology == "aggregated" else 15.0
    assert rows["early"]["arrival_time_ms"] == 0.0
    assert rows["early"]["first_token_ms"] == first_token
    assert rows["r0"]["arrival_time_ms"] == 100.0


SESSIONS = {"source_type": "synthetic-session", "load_type": "concurrency", "concurrency": 2,
            "isl": 64, "osl": 4, "request_count": 4, "turns_per_session": 3}


@pytest.mark.parametrize("topology", ["aggregated", "disaggregated"])
def test_submit_during_a_session_run_leaves_the_sessions_alone(topology):
    """The driver hears only of the turns it produced: the sessions run as without the extra
    request (same turn count), and the extra request completes too."""
    spec = {"version": 1, "engine": {"rank": {
        "backend": "vllm", "block_size": 16, "num_gpu_blocks": 1024,
        "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 5.0}}}}
    spec["topology"] = {"kind": "aggregated", "workers": {"initial_workers": 1}}
    if topology == "disaggregated":
        _disaggregated(spec)
    payload = json.dumps({"spec": dict(spec, record_per_request=True), "traffic": SESSIONS})
    plain = build_simulation(load_payload(payload)).run().report().summary
    submitted = []
    sim = build_simulation(load_payload(payload), on_event=lambda kind, t, r: (
        sim.submit(_request(7, rid="ext")) if kind == "completed" and not submitted
        and not submitted.append(t) else None))
    sim.run()
    summary = sim.report().summary
    assert summary["completed_requests"] == plain["completed_requests"] + 1 == 4 * 3 + 1
    assert _rows(sim)["ext"]["arrival_time_ms"] == submitted[0]


def test_submit_during_an_agentic_run():
    fixture = load_fixture("agentic/trace_agentic_v2")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        sim = build_simulation(load_payload((ROOT / fixture["payload"]).read_text()))
        sim.run_until(1.0)
        sim.submit(_request(3, rid="ext"))
        sim.run()
    finally:
        os.chdir(cwd)
    report = sim.report()
    assert report.summary["completed_requests"] == fixture["summary"]["completed_requests"] + 1
    # the graph's own bookkeeping never saw the extra request
    for key in ("total_trajectories", "completed_trajectories", "agentic_lifecycle_event_count"):
        assert report.summary[key] == fixture["summary"][key], key


@pytest.mark.parametrize("backend, message", [
    ("sglang", "submit: $.spec.engine.rank.num_gpu_blocks: 64 blocks of 1 tokens (64 KV tokens "
               "per rank) cannot hold request 'huge': 100 prompt tokens plus an output reserve "
               "of 4 (at most $.spec.engine.rank.sglang.clip_max_new_tokens = 4096); request "
               "'huge' can never be scheduled"),
    ("vllm", "submit: $.spec.engine.rank.num_gpu_blocks: the prompt of request 'huge' (100 "
             "tokens) needs 7 KV blocks of 16 tokens, a rank has 4; request 'huge' can never be "
             "scheduled"),
    ("trtllm", "submit: $.spec.engine.rank.num_gpu_blocks: the prompt of request 'huge' (100 "
               "tokens) needs 7 KV blocks of 16 tokens, a rank has 4; request 'huge' can never "
               "be scheduled"),
])
def test_a_request_that_can_never_fit_is_refused_with_one_line(backend, message):
    blocks, block_size = (64, 1) if backend == "sglang" else (4, 16)
    spec = bare_spec([req(0, 16, 4)], backend=backend, blocks=blocks, block_size=block_size)
    sim = build_simulation(load_payload(json.dumps(spec)))
    sim.run()
    with pytest.raises(SimulationError) as info:
        sim.submit(_request(2, isl=100, rid="huge"))
    assert str(info.value) == message
    # the simulation is untouched and goes on
    sim.submit(_request(3, rid="ok"))
    sim.run()
    assert sim.report().summary["completed_requests"] == 2


@pytest.mark.parametrize("bad, message", [
    ({"input": [1, 2]}, "submit: expected a SimRequest, got dict"),
    (SimRequest(0, Prompt.from_tokens([1, 2]), -1, 0.0, request_id="neg"),
     "submit: request 'neg': max_output must be an integer >= 0, got -1"),
    (SimRequest(0, Prompt.from_tokens([]), 2, 0.0, request_id="empty"),
     "submit: request 'empty': the prompt must have at least 1 token, got 0"),
    (SimRequest(0, Prompt.from_tokens([1, 2]), 2, 0.0, request_id="far", dp_rank=3),
     "submit: request 'far': dp_rank 3 out of range for dp_size 1"),
])
def test_a_malformed_submission_is_one_error_line(bad, message):
    sim = build_simulation(load_payload(json.dumps(bare_spec([req(0, 16, 4)]))))
    with pytest.raises(SimulationError) as info:
        sim.submit(bad)
    assert str(info.value) == message
    sim.run()
    assert sim.report().summary["num_requests"] == 1


def test_a_request_is_submitted_once():
    sim = build_simulation(load_payload(json.dumps(bare_spec([req(0, 16, 4)]))))
    once = _request(1, rid="once")
    sim.submit(once)
    with pytest.raises(SimulationError, match="submit: request 'once' was submitted already"):
        sim.submit(once)

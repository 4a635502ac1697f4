"""The run-time invariant checker (``AISIMULATE_CHECK=1``, issue 8 item 8): reference payloads of
every engine and topology run clean under it, and it catches a state broken on purpose."""

from __future__ import annotations

import json
import math
import os

import pytest

from aisimulate_core import Prompt, SimRequest, build_simulation, load_payload
from aisimulate_core.errors import SimulationError
from aisimulate_core.runtime.simulation import PASS_DONE
from reference import ROOT, load_fixture, record_mismatches, summary_mismatches
from test_semantics_cases import bare_spec, req

CHECKED = [
    "vllm_kv_pressure_lifo", "vllm_prefix_reuse", "vllm_2workers_dp2",
    "sglang_prefix_pressure", "sglang_2workers_dp2", "sglang_poisson_pressure_polynomial",
    "trtllm_kv_pressure", "trtllm_prefix_reuse",
    "disagg_poisson_pressure", "disagg_dp_groups_vllm", "disagg_decode_preemption",
    "disagg_trtllm_pressure", "trace_mooncake_sessions_conc2", "agentic/trace_agentic_v2",
]


@pytest.fixture
def checks(monkeypatch):
    monkeypatch.setenv("AISIMULATE_CHECK", "1")


def _build(name):
    fixture = load_fixture(name)
    cwd = os.getcwd()
    os.chdir(ROOT)          # payload paths (traces) are relative to the project root
    try:
        return build_simulation(load_payload((ROOT / fixture["payload"]).read_text())), fixture
    finally:
        os.chdir(cwd)


def _run(sim):
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        sim.run()
    finally:
        os.chdir(cwd)
    return sim.report()


@pytest.mark.parametrize("name", CHECKED)
def test_reference_payloads_run_clean_under_the_checker(checks, name):
    sim, fixture = _build(name)
    assert sim.invariant_checker is not None
    report = _run(sim)
    checker = sim.invariant_checker
    assert len(checker.terminal) == report.summary["num_requests"] > 0
    assert record_mismatches(report.per_request, fixture["per_request"]) == []
    if not name.startswith("agentic/"):    # agentic digests are compared elsewhere
        assert summary_mismatches(report.summary, fixture["summary"]) == []


def test_the_checker_costs_nothing_when_off(monkeypatch):
    monkeypatch.delenv("AISIMULATE_CHECK", raising=False)
    sim, _ = _build("vllm_prefix_reuse")
    # nothing is wrapped: the instance has no per-step hook of its own
    assert not hasattr(sim, "invariant_checker")
    assert "_step" not in vars(sim) and "_terminal" not in vars(sim)


def _running(spec, until):
    sim = build_simulation(load_payload(json.dumps(spec)))
    sim.run_until(until)
    return sim


def test_a_corrupted_radix_pool_count_is_caught(checks):
    sim = _running(bare_spec([req(0, 64, 16), req(1, 64, 16)], backend="sglang", block_size=1), 12.0)
    sim.workers[0].ranks[0].cache.free_tokens -= 1       # a page vanishes from the pool
    with pytest.raises(SimulationError) as info:
        sim.run()
    assert str(info.value).startswith(
        "invariant: KV blocks of worker 0 dp rank 0 are not conserved: free ")
    assert "!= the pool's 1024" in str(info.value)


def test_a_block_taken_outside_any_request_is_caught(checks):
    sim = _running(bare_spec([req(0, 64, 16), req(1, 64, 16)]), 12.0)
    pool = sim.workers[0].ranks[0].pool
    pool.allocate(pool.new_seq(), 1)                       # held by no request of the rank
    with pytest.raises(SimulationError, match=r"are not conserved: \d+ blocks are in use but its "
                                              r"requests hold only \d+"):
        sim.run()


def test_a_clock_going_back_is_caught(checks):
    sim = _running(bare_spec([req(0, 64, 16)]), 22.0)
    sim.queue.push(sim.now_ms - 5.0, PASS_DONE, 0)        # an event in the past
    with pytest.raises(SimulationError, match=r"invariant: the clock went back from 22.0 ms to "
                                              r"17.0 ms"):
        sim.run()


def test_a_second_terminal_of_a_request_is_caught(checks):
    finished = []
    sim = build_simulation(load_payload(json.dumps(bare_spec([req(0, 16, 4)]))),
                           on_event=lambda kind, t, r: finished.append(r) if kind == "completed"
                           else None)
    sim.run()
    with pytest.raises(SimulationError, match=r"invariant: request 'r0' reached 'completed' at "
                                              r"30.0 ms after it had ended 'completed'"):
        sim.events.on_finish(finished[0], 30.0, "completed")


def test_a_run_that_drains_with_an_arrival_never_ended_is_caught(checks):
    sim = build_simulation(load_payload(json.dumps(bare_spec([req(0, 16, 4)]))))
    sim.arrived += 1                                       # an arrival the run lost track of
    with pytest.raises(SimulationError, match=r"invariant: the run drained with 2 arrivals, 1 "
                                              r"terminals and 0 requests in flight"):
        sim.run()
    assert math.isinf(sim.max_sim_time_ms)


def test_submitted_requests_are_checked_too(checks):
    sim = build_simulation(load_payload(json.dumps(bare_spec([req(0, 16, 4)]))))
    sim.run()
    sim.submit(SimRequest(0, Prompt.from_tokens(range(100, 116)), 3, 0.0, request_id="ext"))
    sim.run()
    assert len(sim.invariant_checker.terminal) == 2


@pytest.mark.parametrize("name, ratio, top", [
    ("repro_reuse_ratio_above_1", 8.0, (16, 1)),
    ("repro_reused_input_tokens_above_input_length", 0.575, (46, 1)),
])
def test_reuse_above_the_prompt_is_the_reference_figure(checks, name, ratio, top):
    """Not an invariant: a readmission after preemption re-hits the request's own generated
    blocks, so ``reused_input_tokens`` can exceed ``input_length`` and the ratio exceed 1. The
    reference reports exactly that (fixtures recorded from it); parity is kept."""
    sim, fixture = _build(name)
    report = _run(sim)
    assert report.summary["prefix_cache_reused_ratio"] == fixture["summary"][
        "prefix_cache_reused_ratio"] == ratio
    assert summary_mismatches(report.summary, fixture["summary"]) == []
    assert record_mismatches(report.per_request, fixture["per_request"]) == []
    above = [(r["reused_input_tokens"], r["input_length"]) for r in fixture["per_request"]
             if r["reused_input_tokens"] > r["input_length"]]
    assert max(above) == top

"""The plain aggregated run in one C loop (runtime/plain_native.py, csrc/plain_loop.c)
against its twin, the Python loop (``Simulation._run_plain``) over the same C ranks.

Seeded random payloads the C loop takes (1 to 4 workers, attention DP 1 to 3, small KV
pools that preempt, budgets, max_num_seqs, max_model_len, prefix groups, Poisson, constant
rate, burst and closed-loop arrivals, Mooncake traces of one-turn and multi-turn sessions by
timestamps or in a closed loop, fixed and polynomial timing, SLAs, time cutoffs, per-request
records kept or streamed) must give the same report (wall time aside; its records too) or the
same error line both ways; the C loop must have run.
"""

from __future__ import annotations

import json
import random

import pytest

from aisimulate_core import AisimError, run_replay
from aisimulate_core import native
from aisimulate_core.runtime import plain_native
from report_invariants import comparable

pytestmark = pytest.mark.skipif(native.lib is None or native.resolve_backend() != "c",
                                reason="the C loop runs on the C backend")

CASES = 300


def _payload(rng):
    block = rng.choice([2, 3, 4, 8, 16, 32])
    isl = rng.randint(1, 300)
    osl = rng.choice([1, 1, 2, 3, 5, 8, 20, 60]) if rng.random() < 0.9 else rng.randint(1, 6)
    blocks_needed = -(-(isl + osl) // block)
    draw = rng.random()
    if draw < 0.35:           # room for the prompts of a few, not their outputs: preemptions
        num_blocks = -(-isl // block) * rng.choice([1, 2, 3]) + rng.randint(1, 4)
        osl = rng.choice([osl, 20, 60, 120])
        blocks_needed = -(-(isl + osl) // block)
        num_blocks = max(num_blocks, blocks_needed)
    elif draw < 0.85:         # room for a few requests at once
        num_blocks = blocks_needed * rng.choice([1, 1, 2, 3, 5, 10, 40])
    else:                     # too little for some: rejections, stalls
        num_blocks = rng.randint(max(1, blocks_needed // 2), blocks_needed)
    rank = {
        "backend": rng.choice(["vllm", "vllm", "vllm", "trtllm"]),
        "block_size": block,
        "num_gpu_blocks": num_blocks,
        "max_num_seqs": rng.choice([1, 2, 3, 8, 16, 64, 256]),
        "max_num_batched_tokens": rng.choice([8, 32, 64, 200, 512, 8192]),
        "enable_prefix_caching": rng.random() < 0.8,
        "enable_chunked_prefill": rng.random() < 0.9,
        "preemption_mode": rng.choice(["lifo", "fifo"]),
        "timing_model": (
            {"type": "polynomial"} if rng.random() < 0.5 else
            {"type": "fixed", "prefill_ms": rng.choice([0.5, 3.0, 10.0, 25.5]),
             "decode_ms": rng.choice([0.25, 1.0, 5.0, 7.3])}),
    }
    if rng.random() < 0.25:
        rank["max_model_len"] = rng.randint(max(2, isl - 3), isl + osl + 5)
    traffic = {
        "source_type": "synthetic",
        "isl": isl,
        "osl": osl,
        "request_count": rng.randint(1, 120),
        "arrival_seed": rng.randint(0, 1000),
    }
    load = rng.choice(["poisson", "poisson", "constant_rate", "concurrency", "concurrency"])
    traffic["load_type"] = load
    if load == "concurrency":
        traffic["concurrency"] = rng.randint(1, 12)
    else:
        traffic["request_rate"] = rng.choice([5.0, 40.0, 200.0, 1000.0, 5000.0, 50000.0])
    if rng.random() < 0.5:
        traffic["shared_prefix_ratio"] = rng.choice([0.1, 0.5, 0.9, 1.0])
        traffic["num_prefix_groups"] = rng.randint(1, 5)
    spec = {
        "version": 1,
        "topology": {"kind": "aggregated",
                     "workers": {"initial_workers": rng.randint(1, 4)}},
        "engine": {"rank": rank, "dp_size": rng.choice([1, 1, 1, 2, 3])},
        "record_per_request": False,
    }
    if rng.random() < 0.4:
        # (an E2E bound stands alone)
        keys = ("e2e_ms",) if rng.random() < 0.3 else \
            [key for key in ("ttft_ms", "itl_ms") if rng.random() < 0.7]
        spec["sla"] = {key: rng.choice([5.0, 30.0, 100.0, 400.0, 50]) for key in keys}
    if rng.random() < 0.25:
        spec["max_sim_time_ms"] = rng.choice([1.0, 50.0, 300.0, 2000.0])
    return {"spec": spec, "traffic": traffic}


def _trace_rows(rng, isl, osl, block):
    """Mooncake rows of a few sessions (one turn each, or several with session ids and think
    delays), prompts sharing prefixes of a few groups, in a random interleaving that keeps
    each session's turns in order."""
    sessions = []
    multi = rng.random() < 0.5
    fresh = [1000]
    groups = [[rng.randint(0, 50) for _ in range(rng.randint(1, 4))] for _ in range(3)]
    clock = 0.0
    for s in range(rng.randint(1, 40)):
        clock += rng.choice([0.0, 0.0, 0.5, 3.0, 25.0, 140.0])
        turns = []
        for k in range(rng.randint(1, 4) if multi else 1):
            length = rng.randint(1, isl + 20)
            need = -(-length // block)
            ids = list(rng.choice(groups))[:need] if rng.random() < 0.7 else []
            while len(ids) < need + rng.choice([0, 0, 2]):
                ids.append(fresh[0])
                fresh[0] += 1
            row = {"input_length": length, "output_length": rng.randint(1, osl + 3),
                   "hash_ids": ids}
            if k == 0:
                row["timestamp"] = clock if rng.random() < 0.8 else int(clock)
            elif rng.random() < 0.5:
                row["delay"] = rng.choice([0.0, 1.5, 20.0])
            if multi:
                row["session_id"] = f"s{s}"
            turns.append(row)
        sessions.append(turns)
    rows = []
    while sessions:
        turns = rng.choice(sessions)
        rows.append(turns.pop(0))
        if not turns:
            sessions.remove(turns)
    return rows


def _trace_payload(rng, directory, case):
    """A random deployment (as _payload's) replaying a random Mooncake trace."""
    return _trace(rng, _payload(rng), directory / f"trace_{case}.jsonl", speedup=True)


def _trace(rng, payload, path, speedup=False):
    """``payload`` replaying a random Mooncake trace (_trace_rows) from ``path``, by
    timestamps (sped up at random, when ``speedup``) or in a closed loop (both loops' tests)."""
    traffic = payload["traffic"]
    block = rng.choice([2, 4, 8, 16])
    rows = _trace_rows(rng, traffic["isl"], traffic["osl"], block)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    payload["traffic"] = {"source_type": "trace", "trace_path": str(path),
                          "trace_format": "mooncake", "trace_block_size": block}
    if rng.random() < 0.3:
        payload["traffic"]["replay_concurrency"] = rng.randint(1, 6)
    elif speedup and rng.random() < 0.2:   # (the reference refuses a speed-up in a closed loop)
        payload["traffic"]["arrival_speedup_ratio"] = rng.choice([0.5, 2.0, 3.0])
    return payload


def _sessions(rng, payload):
    """``payload`` with synthetic sessions of several turns instead of one (both loops'
    tests)."""
    traffic = payload["traffic"]
    traffic["source_type"] = "synthetic-session"
    traffic["turns_per_session"] = rng.randint(1, 4)
    traffic["request_count"] = max(1, traffic["request_count"] // 2)
    if rng.random() < 0.6:
        traffic["inter_turn_delay_ms"] = rng.choice([0.0, 2.5, 40.0])
    return payload


def _report(payload, progress=None, on_record=None):
    try:
        report = run_replay(json.loads(json.dumps(payload)), progress=progress,
                            on_record=on_record)
    except AisimError as error:
        return f"{type(error).__name__}: {error}"
    summary = comparable(json.loads(report.to_json()))
    return summary


class _Count:
    """How many runs went through a C loop (its module's run, called for real; both loops'
    tests)."""

    def __init__(self, run):
        self.run = run
        self.calls = 0

    def __call__(self, sim, limit):
        self.calls += 1
        return self.run(sim, limit)


def test_random_runs_match_the_python_loop(monkeypatch, counted):
    rng = random.Random(20261201)
    counter = counted
    ran = 0
    for case in range(CASES):
        payload = _payload(rng)
        before = counter.calls
        monkeypatch.setattr(plain_native, "ENABLED", True)
        fast = _report(payload)
        took = counter.calls - before
        monkeypatch.setattr(plain_native, "ENABLED", False)
        slow = _report(payload)
        assert counter.calls == before + took
        assert fast == slow, (case, payload)
        ran += took
    # (a payload the validation refuses never reaches a loop)
    assert ran > CASES * 0.95


def _both_ways(monkeypatch, counter, payload, on_record=False):
    """The payload's report through the C loop and through the Python loop (with the
    records streamed, when on_record); how many runs took the C loop."""
    out, took = [], 0
    for enabled in (True, False):
        before = counter.calls
        streamed = []
        monkeypatch.setattr(plain_native, "ENABLED", enabled)
        report = _report(payload, on_record=streamed.append if on_record else None)
        took += counter.calls - before
        out.append((report, json.loads(json.dumps(streamed))))
    assert out[0] == out[1], payload
    return took


def test_random_runs_keeping_records_match_the_python_loop(monkeypatch, counted):
    # the per-request records (kept, or streamed to on_record) are the Python loop's
    rng = random.Random(20261202)
    ran = 0
    cases = 120
    for case in range(cases):
        payload = _payload(rng)
        streamed = rng.random() < 0.4
        payload["spec"]["record_per_request"] = not streamed
        ran += _both_ways(monkeypatch, counted, payload, on_record=streamed)
    assert ran > cases * 0.95


def test_random_trace_runs_match_the_python_loop(monkeypatch, counted, tmp_path):
    # Mooncake traces: one-turn rows and multi-turn sessions, by timestamps or closed loop,
    # records off, kept or streamed
    rng = random.Random(20261203)
    ran = 0
    cases = 160
    for case in range(cases):
        payload = _trace_payload(rng, tmp_path, case)
        draw = rng.random()
        payload["spec"]["record_per_request"] = draw < 0.4
        ran += _both_ways(monkeypatch, counted, payload, on_record=0.4 <= draw < 0.6)
    assert ran > cases * 0.95


def test_random_synthetic_session_runs_match_the_python_loop(monkeypatch, counted):
    # synthetic sessions of several turns (SyntheticSessions behind the session driver), by
    # timestamps or closed loop, with think times, prefix groups, records off, kept or streamed
    rng = random.Random(20261204)
    ran = 0
    cases = 120
    for case in range(cases):
        payload = _sessions(rng, _payload(rng))
        draw = rng.random()
        payload["spec"]["record_per_request"] = draw < 0.3
        ran += _both_ways(monkeypatch, counted, payload, on_record=0.3 <= draw < 0.45)
    assert ran > cases * 0.95


def test_an_arrival_in_a_later_round_of_an_instant_waits_for_the_pass_started_then(
        monkeypatch, counted):
    # features_agentic/concurrency_late_arrival_at_pass_end (recorded on the reference): a
    # zero-time rejection at 30 frees the closed loop's slot; the request placed then, in a
    # later round of the instant, waits for the pass its worker started at 30 (admitted at 35)
    from pathlib import Path
    folder = Path(__file__).resolve().parent / "fixtures" / "features_agentic"
    payload = json.loads((folder / "concurrency_late_arrival_at_pass_end.json").read_text())
    payload["traffic"]["trace_path"] = str(folder / "concurrency_late_arrival_at_pass_end.jsonl")
    assert _both_ways(monkeypatch, counted, payload) == 1
    fast = _report(payload)
    assert fast["per_request"][-1]["first_admit_ms"] == 35.0


def test_a_streamed_run_hands_records_over_as_it_goes(monkeypatch, counted):
    # more records than one hand-over holds: the sink hears them while the run goes on (in
    # batches of RECORDS_EVERY), in the Python loop's order
    payload = json.loads(json.dumps(_STALL))
    payload["spec"]["engine"]["rank"].update(enable_chunked_prefill=True, num_gpu_blocks=4096)
    payload["traffic"].update(request_count=3 * plain_native.RECORDS_EVERY + 5,
                              request_rate=400.0, osl=3)
    monkeypatch.setattr(plain_native, "RECORDS_EVERY", 1000)
    assert _both_ways(monkeypatch, counted, payload, on_record=True) == 1


def test_the_c_loop_takes_the_plain_case_and_declines_others(monkeypatch):
    from aisimulate_core.runtime.build import build_simulation
    from aisimulate_core.spec import load_payload
    payload = _payload(random.Random(5))
    payload["spec"]["engine"]["rank"].pop("max_model_len", None)
    sim = build_simulation(load_payload(json.dumps(payload)))
    assert plain_native.eligible(sim, sim.max_sim_time_ms) is None
    payload["spec"]["record_per_request"] = True
    sim = build_simulation(load_payload(json.dumps(payload)))
    assert plain_native.eligible(sim, sim.max_sim_time_ms) is None
    payload["spec"]["record_per_request"] = False
    # a pass of 5 * 10^12 ms: Python rounds it with its integers, C could not
    payload["spec"]["engine"]["rank"]["timing_model"] = {"type": "fixed", "prefill_ms": 5e12,
                                                         "decode_ms": 1.0}
    sim = build_simulation(load_payload(json.dumps(payload)))
    assert plain_native.eligible(sim, sim.max_sim_time_ms) == \
        "pass times the C loop cannot round as Python does"
    monkeypatch.setattr(plain_native, "ENABLED", False)
    sim = build_simulation(load_payload(json.dumps(payload)))
    assert plain_native.eligible(sim, sim.max_sim_time_ms) == "switched off"


_STALL = {
    "spec": {"version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 2}},
             "engine": {"rank": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 64,
                                 "max_num_seqs": 8, "max_num_batched_tokens": 32,
                                 "enable_chunked_prefill": False,
                                 "timing_model": {"type": "fixed", "prefill_ms": 1.0,
                                                  "decode_ms": 1.0}}},
             "record_per_request": False},
    "traffic": {"source_type": "synthetic", "load_type": "poisson", "isl": 40, "osl": 4,
                "request_count": 3, "request_rate": 10.0, "arrival_seed": 1},
}


@pytest.fixture
def counted(monkeypatch):
    """plain_native.run, counting the runs that went through it."""
    counter = _Count(plain_native.run)
    monkeypatch.setattr(plain_native, "run", counter)
    return counter


def test_a_stalled_run_words_the_python_loops_error(monkeypatch, counted):
    # chunked prefill off and a prompt above the token budget: the head can never start
    payload = _STALL
    fast = _report(payload)
    assert counted.calls == 1
    monkeypatch.setattr(plain_native, "ENABLED", False)
    assert fast == _report(payload)
    assert isinstance(fast, str) and "can never be scheduled" in fast


def test_progress_is_reported_at_the_same_steps(monkeypatch, counted):
    # a progress callback hears the loop every 4096 steps, from C as from Python, and the
    # run's summary is the same
    payload = json.loads(json.dumps(_STALL))
    payload["spec"]["engine"]["rank"]["enable_chunked_prefill"] = True
    payload["traffic"].update(request_count=6000, request_rate=400.0, osl=6)
    calls, summaries = {True: [], False: []}, {}
    for enabled in (True, False):
        monkeypatch.setattr(plain_native, "ENABLED", enabled)
        summaries[enabled] = _report(payload,
                                     progress=lambda *args: calls[enabled].append(args))
    assert counted.calls == 1
    assert len(calls[True]) >= 2 and calls[True] == calls[False]
    # (6000 samples: the C statistics sort them by radix, not by comparison)
    assert summaries[True]["completed_requests"] == 6000
    assert summaries[True] == summaries[False]


def _state(payload):
    """What a simulation holds after its run: counters, the driver's and the round robin's
    positions, each rank's pass history (the error line instead, if it fails)."""
    from aisimulate_core.runtime.build import build_simulation
    from aisimulate_core.spec import load_payload
    sim = build_simulation(load_payload(json.dumps(payload)))
    try:
        sim.run()
    except AisimError as error:
        return f"{type(error).__name__}: {error}"
    driver, policy = sim.driver, sim.router.policy.policy
    ranks = [rank for worker in sim.workers for rank in worker.ranks]
    return {
        "counts": (sim.now_ms, sim.arrived, sim.completed, sim.in_flight, sim._next_uuid,
                   sim.is_done()),
        "driver": (driver._drawn, getattr(driver, "_made", None),
                   getattr(driver, "_next_ms", None), sorted(driver._heap),
                   getattr(driver, "_active", None), getattr(driver, "_next_pending", None)),
        "round_robin": (policy._cursor, dict(policy._rank_cursors)),
        "workers": [(w.busy, w.generation, w.pass_end_ms) for w in sim.workers],
        "queue": sim.queue.peek_time(),
        "ranks": [(list(rank.pass_ends), rank.break_gaps, list(rank.itl_diff),
                   rank.committed_prefill_tokens, rank.itl_gaps()) for rank in ranks],
        "report": comparable(json.loads(sim.report().to_json())),
    }


def test_a_run_leaves_the_simulation_as_the_python_loop_does(monkeypatch, counted):
    rng = random.Random(77)
    for case in range(60):
        payload = _payload(rng)
        monkeypatch.setattr(plain_native, "ENABLED", True)
        fast = _state(payload)
        monkeypatch.setattr(plain_native, "ENABLED", False)
        assert fast == _state(payload), (case, payload)
    assert counted.calls == 60


def test_fresh_ids_that_wrap_past_2_to_the_32(monkeypatch, counted):
    # 2^31 - 5 groups of 2 shared blocks leave 10 fresh ids: every fifth request wraps them
    payload = json.loads(json.dumps(_STALL))
    payload["spec"]["engine"]["rank"].update(enable_chunked_prefill=True,
                                             max_num_batched_tokens=256)
    payload["traffic"].update(isl=64, osl=3, request_count=40, request_rate=300.0,
                              shared_prefix_ratio=0.5, num_prefix_groups=2 ** 31 - 5)
    fast = _report(payload)
    monkeypatch.setattr(plain_native, "ENABLED", False)
    assert isinstance(fast, dict) and fast == _report(payload)
    assert counted.calls == 1 and fast["completed_requests"] == 40

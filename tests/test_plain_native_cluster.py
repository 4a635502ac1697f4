"""Scheduled scaling and the kv_router inside the plain aggregated C loop (runtime/plain_native.py's _Scaling,
csrc/plain_loop.c's pauses) against its twin, the Python loop (``Simulation._run_plain``).

Seeded random payloads of test_plain_native (workers, attention DP, small KV pools, budgets,
arrivals, traces, timing, SLAs, cutoffs) with a random ``schedule`` of targets (up, down,
to none), startup delays (starting workers cancelled, ready ones taking arrivals) and drains
of busy workers, records kept or streamed, must give the same report (the lifecycle
operations and worker seconds with it; its records too), the same state after the run, or
the same error line both ways; the C loop must have run.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from aisimulate_core import AisimError
from aisimulate_core import native
from aisimulate_core.runtime import plain_native
from report_invariants import comparable
from test_plain_native import _payload, _report, _trace_payload, counted  # noqa: F401

pytestmark = pytest.mark.skipif(native.lib is None or native.resolve_backend() != "c",
                                reason="the C loop runs on the C backend")

CASES = 250
ROOT = Path(__file__).resolve().parents[1]


def _case(name):
    """A case of ../shared/bench/cluster/, its trace path made absolute (the payloads name
    it from the project root)."""
    payload = json.loads((ROOT.parent / "shared" / "bench" / "cluster" / f"{name}.json")
                         .read_text())
    traffic = payload["traffic"]
    traffic["trace_path"] = str(ROOT / traffic["trace_path"])
    return payload


def _scaled(rng, payload):
    """``payload`` with a random schedule of worker targets and a startup delay."""
    spec = payload["spec"]
    horizon = rng.choice([20.0, 100.0, 400.0, 2000.0])
    ticks = []
    for _ in range(rng.randint(1, 6)):
        # (whole ms often: ticks meet arrivals, completions and workers getting ready)
        at = round(rng.uniform(0.0, horizon), rng.choice([0, 0, 1, 3]))
        target = rng.choice([0, 1, 1, 2, 2, 3, 4, 5]) if rng.random() < 0.95 else 0
        ticks.append({"at_ms": at, "decode_target": target})
    if rng.random() < 0.8:
        ticks = [t for t in ticks if t["decode_target"] > 0] or [{"at_ms": 1.0,
                                                                   "decode_target": 2}]
    ticks = list({t["at_ms"]: t for t in ticks}.values())   # (strictly increasing times)
    ticks.sort(key=lambda t: t["at_ms"])
    spec.setdefault("adapters", {})["scaling"] = {"provider": "schedule",
                                                  "config": {"ticks": ticks}}
    spec["topology"]["workers"]["startup_delay_ms"] = rng.choice(
        [0.0, 0.0, 0.5, 5.0, 35.0, 120.0])
    spec["record_per_request"] = rng.random() < 0.5
    return payload


def _both(monkeypatch, payload, on_record):
    out = []
    for enabled in (True, False):
        streamed = []
        monkeypatch.setattr(plain_native, "ENABLED", enabled)
        report = _report(payload, on_record=streamed.append if on_record else None)
        out.append((report, json.loads(json.dumps(streamed))))
    return out


def test_random_scaled_runs_match_the_python_loop(monkeypatch, counted, tmp_path):
    rng = random.Random(20261202)
    ran = operations = 0
    for case in range(CASES):
        payload = _trace_payload(rng, tmp_path, case) if rng.random() < 0.4 else _payload(rng)
        payload = _scaled(rng, payload)
        before = counted.calls
        fast, slow = _both(monkeypatch, payload, on_record=rng.random() < 0.2)
        assert fast == slow, (case, payload)
        ran += counted.calls - before
        if isinstance(fast[0], dict):
            operations += len(fast[0].get("lifecycle_operations") or ())
    assert ran > CASES * 0.9
    assert operations > CASES   # (the schedules did change the pools)


def _state(payload):
    """What a scaled simulation holds after its run (the error line, if it fails)."""
    from aisimulate_core.runtime.build import build_simulation
    from aisimulate_core.spec import load_payload
    sim = build_simulation(load_payload(json.dumps(payload)))
    try:
        sim.run()
    except AisimError as error:
        return f"{type(error).__name__}: {error}"
    policy, cluster = sim.router.policy.policy, sim.cluster
    life = sim.pools["agg"].life
    ranks = [rank for worker in sim.workers for rank in worker.ranks]
    return {
        "counts": (sim.now_ms, sim.arrived, sim.completed, sim.in_flight, sim._next_uuid,
                   sim.is_done()),
        "round_robin": (policy._cursor, dict(policy._rank_cursors),
                        [w.worker_id for w in policy._workers]),
        "router": [w.worker_id for w in sim.router.active],
        "lifecycle": (dict(life.state), dict(life.added_ms), dict(life.removed_ms),
                      life.next_id, sorted(sim.pools["agg"].workers)),
        "cluster": (cluster.next_tick_ms, list(cluster.starting), cluster._tick_ordinal,
                    len(cluster.settling), cluster.probe),
        "workers": [(w.idx, w.worker_id, w.busy, w.generation, w.pass_end_ms)
                    for w in sim.workers],
        "queue": sim.queue.peek_time(),
        "ranks": [(list(rank.pass_ends), rank.break_gaps, rank.committed_prefill_tokens,
                   rank.itl_gaps()) for rank in ranks],
        "report": comparable(json.loads(sim.report().to_json())),
    }


def test_a_scaled_run_leaves_the_simulation_as_the_python_loop_does(monkeypatch, counted):
    rng = random.Random(4242)
    for case in range(60):
        payload = _scaled(rng, _payload(rng))
        monkeypatch.setattr(plain_native, "ENABLED", True)
        fast = _state(payload)
        monkeypatch.setattr(plain_native, "ENABLED", False)
        assert fast == _state(payload), (case, payload)
    assert counted.calls >= 50


def test_the_s1_case_runs_in_c(monkeypatch, counted):
    # scheduled scaling of the cluster bench: 2 -> 4 (startup 35 ms) -> 3 (a starting worker
    # cancelled) -> 1 (two busy workers drain) -> 2 (new id 4), records kept
    payload = _case("s1_schedule_scaling_agg_rr")
    fast, slow = _both(monkeypatch, payload, on_record=False)
    assert fast == slow and counted.calls == 1
    report = fast[0]
    assert report["completed_requests"] == 40 and len(report["lifecycle_operations"]) == 8


def _kv_routed(rng, payload):
    """``payload`` placed by the kv_router with random knobs (its own index fed by lagged KV
    events, or the engines' index), sometimes with a pending queue (the Python loop's)."""
    config = {}
    if rng.random() < 0.5:
        config["kv_event_lag_ms"] = rng.choice([0.5, 1.5, 10.0])
    if rng.random() < 0.5:
        config.update(overlap_score_credit=rng.choice([0.5, 1.0, 1.25, 3.0]),
                      prefill_load_scale=rng.choice([0.0, 0.75, 1.0, 2.0]),
                      overlap_score_credit_decay=rng.choice([0.0, 0.5, 2.0]),
                      decode_active_request_weight=rng.choice([0.0, 0.25, 1.0]))
    if rng.random() < 0.3:
        config.update(router_assume_kv_reuse=rng.random() < 0.5,
                      router_track_active_blocks=rng.random() < 0.7,
                      router_track_prefill_tokens=rng.random() < 0.7)
    if rng.random() < 0.4:
        config.update(router_queue_threshold=rng.choice([0.0, 0.02, 0.05, 0.3, 1.0]),
                      router_queue_policy=rng.choice(["fcfs", "lcfs", "wspt"]))
        if rng.random() < 0.6:   # (the queue's order reads them)
            _prioritize(rng, payload["traffic"]["trace_path"])
    payload["spec"].setdefault("adapters", {})["placement"] = {"provider": "kv_router",
                                                               "config": config}
    payload["spec"]["record_per_request"] = rng.random() < 0.6
    return payload


def _prioritize(rng, path):
    """Mooncake ``priority`` / ``strict_priority`` fields on some rows of the trace."""
    with open(path) as handle:
        rows = [json.loads(line) for line in handle]
    for row in rows:
        if rng.random() < 0.5:
            row["priority"] = rng.choice([0, 1, 2, 5, -1])
        if rng.random() < 0.2:
            row["strict_priority"] = rng.choice([0, 1, 3])
    with open(path, "w") as handle:
        handle.write("".join(json.dumps(row) + "\n" for row in rows))


def test_random_kv_routed_runs_match_the_python_loop(monkeypatch, counted, tmp_path):
    rng = random.Random(20261203)
    ran = placed = 0
    cases = 200
    for case in range(cases):
        payload = _kv_routed(rng, _trace_payload(rng, tmp_path, case))
        if rng.random() < 0.4:
            payload = _scaled(rng, payload)
            payload["spec"]["record_per_request"] = rng.random() < 0.6
        before = counted.calls
        fast, slow = _both(monkeypatch, payload, on_record=rng.random() < 0.2)
        assert fast == slow, (case, payload)
        ran += counted.calls - before
        if isinstance(fast[0], dict):
            placed += sum(1 for record in fast[0].get("per_request") or ()
                          if record["routing_history"][0]["selected_overlap_blocks"])
    assert ran > cases * 0.75
    assert placed > cases   # (placements did find cached prefixes)


def test_the_kv_router_cases_run_in_c(monkeypatch, counted):
    # (k5: its pending queue, KV event lag and scaling; telemetry aside)
    for name in ("k1_kv_router_agg_2w", "k3_kv_router_dp2_chunked",
                 "k5_kv_router_queue_scaling"):
        payload = _case(name)
        before = counted.calls
        fast, slow = _both(monkeypatch, payload, on_record=False)
        assert fast == slow and counted.calls == before + 1


def _router_state(payload):
    """What the kv_router holds after a run: each scheduler's state and its queue (the error
    line instead, if the run fails)."""
    from aisimulate_core.runtime.build import build_simulation
    from aisimulate_core.spec import load_payload
    sim = build_simulation(load_payload(json.dumps(payload)))
    try:
        sim.run()
    except AisimError as error:
        return f"{type(error).__name__}: {error}"
    policy = sim.router.policy.policy
    keys = [(w.worker_id, rank.dp_rank) for w in sim.workers for rank in w.ranks]
    return {"schedulers": {key: policy._state(key) for key in keys},
            "queued": policy.queued_uuids(),
            "counts": (sim.now_ms, sim.arrived, sim.completed, sim.in_flight, sim.is_done()),
            "report": comparable(json.loads(sim.report().to_json()))}


def test_a_kv_routed_run_leaves_the_router_as_the_python_loop_does(monkeypatch, counted,
                                                                   tmp_path):
    rng = random.Random(515)
    for case in range(60):
        payload = _kv_routed(rng, _trace_payload(rng, tmp_path, case))
        if rng.random() < 0.4:
            payload = _scaled(rng, payload)
        monkeypatch.setattr(plain_native, "ENABLED", True)
        fast = _router_state(payload)
        monkeypatch.setattr(plain_native, "ENABLED", False)
        assert fast == _router_state(payload), (case, payload)
    assert counted.calls >= 40


class _TickForever:
    """A scaling policy that keeps one worker and ticks every ms, reading nothing."""

    reads_snapshot = False
    reads_pass_metrics = False

    def initial_tick_ms(self):
        return 0.0

    def on_tick(self, snapshot):
        return {"target_prefill": None, "target_decode": 1,
                "next_tick_ms": snapshot["now_ms"] + 1.0}


def test_ticks_on_a_stuck_run_stop_it_with_the_python_loops_error(monkeypatch, counted):
    # a head above the token budget never starts; the policy ticks on until the stall limit
    from aisimulate_core import run_replay
    from test_plain_native import _STALL
    payload = json.loads(json.dumps(_STALL))
    payload["spec"]["topology"]["workers"]["initial_workers"] = 1
    errors = []
    for enabled in (True, False):
        monkeypatch.setattr(plain_native, "ENABLED", enabled)
        with pytest.raises(AisimError) as caught:
            run_replay(json.dumps(payload), scaling_policy=_TickForever())
        errors.append(f"{type(caught.value).__name__}: {caught.value}")
    assert counted.calls == 1
    assert errors[0] == errors[1] and "can never be scheduled" in errors[0]

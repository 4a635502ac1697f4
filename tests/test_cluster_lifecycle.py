"""Scaling's worker lifecycle in real runs (CLUSTER.md §3): draining, ids, cancelled starts,
worker-seconds (with scaling and under a time cutoff), when ticks fire, gpu_hours, and the
same-time order of arrivals, ready workers and ticks.

The cases are the payloads of tests/fixtures/cluster/ (vLLM, fixed timing 10 ms prefill / 5 ms
decode, round robin), each with the reference's output recorded by record.py there; every
test states the behaviour it checks by hand, and ``test_matches_the_reference`` compares each
case whole in canonical form (CLUSTER.md §7).
"""

import json
import math
from pathlib import Path

import pytest

from aisimulate_core import run_replay
from cluster_compare import compare

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "fixtures" / "cluster"
LIFECYCLE_CASES = ["drain_queue", "ids_never_reused", "ws_startup_1s", "ws_startup_cancelled",
                   "ws_cutoff_busy", "ws_cutoff_idle", "ticks_while_work", "first_tick_never",
                   "order_arrival_before_tick", "order_ready_takes_arrival", "gpu_hours_disagg"]


def payload(name):
    """A case's payload with its trace path made absolute (the file names it from the root)."""
    loaded = json.loads((CASES / f"{name}.json").read_text())
    loaded["traffic"]["trace_path"] = str(ROOT / loaded["traffic"]["trace_path"])
    return loaded


def expected(name, variant=""):
    suffix = f".{variant}" if variant else ""
    return json.loads((CASES / f"{name}{suffix}.expected.json").read_text())


def run_case(name, *, telemetry_interval_ms=None, **kwargs):
    return run_replay(payload(name), telemetry_interval_ms=telemetry_interval_ms, **kwargs)


def parity_problems(name, variant=""):
    theirs = expected(name, variant)
    interval = theirs["telemetry"]["sample_interval_ms"] if "telemetry" in theirs else None
    report = run_case(name, telemetry_interval_ms=interval)
    samples = report.telemetry["samples"] if report.telemetry is not None else None
    return compare(report.summary, report.per_request, theirs, samples=samples)


def operations(report):
    return report.summary["lifecycle_operations"]


def transitions(report):
    """Each operation as (at_ms, cause, [(worker_id, transition), ...])."""
    return [(op["at_ms"], op["cause"], [(t["worker_id"], t["transition"]) for t in op["transitions"]])
            for op in operations(report)]


def by_arrival(report):
    return sorted(report.per_request, key=lambda r: (r["arrival_time_ms"], -r["input_length"]))


class EveryHundredMs:
    """An embedding program's scaling policy: a tick every 100 ms from ``first``, never
    changing a target; it remembers when it was asked."""

    def __init__(self, first=100.0):
        self.first = first
        self.asked = []

    def initial_tick_ms(self):
        return self.first

    def on_tick(self, snapshot):
        self.asked.append((snapshot["tick_ordinal"], snapshot["now_ms"]))
        return {"target_prefill": None, "target_decode": None,
                "next_tick_ms": snapshot["now_ms"] + 100.0}


@pytest.mark.parametrize("name", LIFECYCLE_CASES)
def test_matches_the_reference(name):
    assert parity_problems(name) == []


def test_a_draining_worker_finishes_its_engine_queue_then_is_removed():
    # two max_num_seqs 1 workers take three requests each at 0; the tick at 0 (after those
    # arrivals are placed) scales to 1: worker 1 drains with one request running and two
    # waiting in its engine, finishes them at 25, 50, 75 and is removed at 75
    report = run_case("drain_queue")
    on_worker_1 = [(r["first_admit_ms"], r["terminal_time_ms"], r["terminal_status"])
                   for r in by_arrival(report) if r["decode_worker_idx"] == 1]
    assert sorted(on_worker_1) == [(0.0, 25.0, "completed"), (25.0, 50.0, "completed"),
                                   (50.0, 75.0, "completed")]
    assert operations(report) == [
        {"operation_ordinal": 0, "at_ms": 0.0, "pool": "agg", "cause": "planner_scale",
         "planner_tick_ordinal": 0, "origin_operation_ordinal": None,
         "transitions": [{"worker_id": 1, "transition": "worker_draining", "prior_state": "active",
                          "state": "draining", "origin_operation_ordinal": 0}],
         "state_after_batch": {"active": [0], "starting": [], "draining": [1]},
         "topology_released_request_uuids": []},
        {"operation_ordinal": 1, "at_ms": 75.0, "pool": "agg", "cause": "drain_settlement",
         "planner_tick_ordinal": None, "origin_operation_ordinal": 0,
         "transitions": [{"worker_id": 1, "transition": "worker_removed", "prior_state": "draining",
                          "state": "removed", "origin_operation_ordinal": 0}],
         "state_after_batch": {"active": [0], "starting": [], "draining": []},
         "topology_released_request_uuids": []},
    ]
    # worker 1 counts until its removal at 75, as worker 0 until the end of the run
    assert report.summary["decode_worker_seconds"] == pytest.approx(0.075 + 0.075, rel=1e-12)


def test_worker_ids_are_never_reused():
    # 1 -> 2 -> 1 -> 2 -> 3 workers: the second and third additions get ids 2 and 3, not 1
    report = run_case("ids_never_reused")
    assert transitions(report) == [
        (10.0, "planner_scale", [(1, "worker_ready")]),
        (20.0, "planner_scale", [(1, "worker_draining"), (1, "worker_removed")]),
        (30.0, "planner_scale", [(2, "worker_ready")]),
        (40.0, "planner_scale", [(3, "worker_ready")]),
    ]
    assert [op["state_after_batch"]["active"] for op in operations(report)] == [
        [0, 1], [0], [0, 2], [0, 2, 3]]
    # round robin goes on from the last worker it used (0) to the next id, 2
    assert [r["decode_worker_idx"] for r in by_arrival(report)] == [0, 2]


def test_a_starting_worker_is_cancelled():
    # a worker with a 50 s startup added at 100 and removed by the tick at 250
    report = run_case("ws_startup_cancelled")
    assert operations(report) == [
        {"operation_ordinal": 0, "at_ms": 100.0, "pool": "agg", "cause": "planner_scale",
         "planner_tick_ordinal": 0, "origin_operation_ordinal": None,
         "transitions": [{"worker_id": 1, "transition": "worker_starting", "prior_state": None,
                          "state": "starting", "origin_operation_ordinal": 0}],
         "state_after_batch": {"active": [0], "starting": [1], "draining": []},
         "topology_released_request_uuids": []},
        {"operation_ordinal": 1, "at_ms": 250.0, "pool": "agg", "cause": "planner_scale",
         "planner_tick_ordinal": 1, "origin_operation_ordinal": 0,
         "transitions": [{"worker_id": 1, "transition": "worker_removed", "prior_state": "starting",
                          "state": "removed", "reason": "startup_cancelled",
                          "origin_operation_ordinal": 0}],
         "state_after_batch": {"active": [0], "starting": [], "draining": []},
         "topology_released_request_uuids": []},
    ]
    # "reason" sits between "state" and the origin, as the reference writes it
    assert list(operations(report)[1]["transitions"][0]) == [
        "worker_id", "transition", "prior_state", "state", "reason", "origin_operation_ordinal"]


def test_cancelling_one_of_two_starting_workers_removes_the_highest_id():
    report = run_case("ws_startup_1s")
    cancel = operations(report)[1]
    assert (cancel["at_ms"], cancel["origin_operation_ordinal"]) == (20.0, 0)
    assert cancel["transitions"] == [
        {"worker_id": 2, "transition": "worker_removed", "prior_state": "starting",
         "state": "removed", "reason": "startup_cancelled", "origin_operation_ordinal": 0}]
    assert cancel["state_after_batch"] == {"active": [0], "starting": [1], "draining": []}


def lifespans_s(report, initial_workers, end_ms):
    """Seconds each worker lived, rebuilt from the lifecycle operations: from its start (0 for
    the initial workers) to its removal or ``end_ms``."""
    added = {w: 0.0 for w in range(initial_workers)}
    removed = {}
    for op in operations(report):
        for t in op["transitions"]:
            if t["transition"] == "worker_starting" or (t["transition"] == "worker_ready"
                                                       and t["prior_state"] is None):
                added[t["worker_id"]] = op["at_ms"]
            elif t["transition"] == "worker_removed":
                removed[t["worker_id"]] = op["at_ms"]
    return {w: (removed.get(w, end_ms) - at) / 1000.0 for w, at in added.items()}


def test_worker_seconds_with_scaling():
    # CLUSTER.md §3.6: one initial worker, ticks 10 -> 3, 20 -> 2, 30 -> 4, 1500 -> 1 with a 1 s
    # startup: 2.025 + 1.49 + 0.01 + 1.47 + 1.47 = 6.465 s (the cancelled start counts too)
    report = run_case("ws_startup_1s")
    assert report.summary["duration_ms"] == 2025.0
    assert lifespans_s(report, 1, 2025.0) == pytest.approx(
        {0: 2.025, 1: 1.49, 2: 0.01, 3: 1.47, 4: 1.47}, rel=1e-12)
    assert report.summary["decode_worker_seconds"] == pytest.approx(6.465, rel=1e-12)
    assert report.summary["prefill_worker_seconds"] == 0.0
    # a worker with a 50 s startup cancelled after 150 ms beside one initial worker: 0.56 + 0.15
    report = run_case("ws_startup_cancelled")
    assert lifespans_s(report, 1, 560.0) == pytest.approx({0: 0.56, 1: 0.15}, rel=1e-12)
    assert report.summary["decode_worker_seconds"] == pytest.approx(0.71, rel=1e-12)


def test_worker_seconds_with_a_time_cutoff():
    # requests every 100 ms, a second worker from 50 ms. Recorded on the reference: the run
    # stops at the last pass completion at or before the cutoff, which the final telemetry
    # sample shows, not at the cutoff itself nor at the last completion (duration_ms)
    busy = run_case("ws_cutoff_busy", telemetry_interval_ms=100.0)   # cutoff 312
    assert busy.summary["duration_ms"] == 225.0
    assert busy.summary["num_requests"] == 4     # the request of 300 arrived, did not finish
    assert busy.telemetry["samples"][-1]["kind"] == "final"
    assert busy.telemetry["samples"][-1]["sampled_at_ms"] == 310.0   # its prefill pass ended
    assert busy.summary["decode_worker_seconds"] == pytest.approx(0.310 + 0.260, rel=1e-12)
    idle = run_case("ws_cutoff_idle", telemetry_interval_ms=100.0)   # cutoff 350
    assert idle.summary["duration_ms"] == 325.0
    assert idle.telemetry["samples"][-1]["sampled_at_ms"] == 325.0
    assert idle.summary["decode_worker_seconds"] == pytest.approx(0.325 + 0.275, rel=1e-12)


def test_ticks_fire_only_while_work_remains():
    # five requests 100 ms apart end at 425: the ticks at 100..400 fire, the one at 500 not
    report = run_case("ticks_while_work")
    ticked = [(op["planner_tick_ordinal"], op["at_ms"]) for op in operations(report)
              if op["cause"] == "planner_scale"]
    assert ticked == [(0, 100.0), (1, 200.0), (2, 300.0), (3, 400.0)]
    assert max(op["at_ms"] for op in operations(report)) == 425.0   # the last settlement
    # an embedding program's policy asking for a tick every 100 ms forever is asked 4 times
    policy = EveryHundredMs()
    report = run_case("ticks_while_work", scaling_policy=policy)
    assert policy.asked == [(0, 100.0), (1, 200.0), (2, 300.0), (3, 400.0)]
    assert report.summary["lifecycle_operations"] == []


def test_a_first_tick_after_the_run_never_fires():
    report = run_case("first_tick_never")          # its only tick is at 10 000
    assert report.summary["lifecycle_operations"] == []
    assert report.summary["decode_worker_seconds"] == pytest.approx(0.425, rel=1e-12)
    policy = EveryHundredMs(first=10000.0)
    run_case("first_tick_never", scaling_policy=policy)
    assert policy.asked == []
    never = EveryHundredMs(first=math.inf)
    run_case("first_tick_never", scaling_policy=never)
    assert never.asked == []


def test_gpu_hours_is_worker_seconds_times_gpus_per_worker():
    # disaggregated: prefill TP 2 (2 GPUs a worker), decode DP 2 x TP 2 (4); both pools 1 -> 2
    # at 50 (prefill startup 20 ms) and back to 1 at 200; the run ends at 400
    summary = run_case("gpu_hours_disagg").summary
    assert (summary["prefill_gpus_per_worker"], summary["decode_gpus_per_worker"]) == (2, 4)
    assert summary["prefill_worker_seconds"] == pytest.approx(0.4 + 0.15, rel=1e-12)
    assert summary["decode_worker_seconds"] == pytest.approx(0.4 + 0.15, rel=1e-12)
    assert summary["gpu_hours"] == pytest.approx((0.55 * 2 + 0.55 * 4) / 3600, rel=1e-12)


@pytest.mark.parametrize("name", LIFECYCLE_CASES)
def test_gpu_hours_formula_holds_in_every_case(name):
    s = run_case(name).summary
    assert s["gpu_hours"] == pytest.approx(
        (s["prefill_worker_seconds"] * s["prefill_gpus_per_worker"]
         + s["decode_worker_seconds"] * s["decode_gpus_per_worker"]) / 3600, rel=1e-12)


def test_an_arrival_at_a_ticks_time_is_placed_before_the_tick():
    # two workers; the request of 0 goes to worker 0; the request of 100 arrives as the tick of
    # 100 scales to 1: it is placed first (round robin: worker 1), then worker 1 drains with it
    report = run_case("order_arrival_before_tick")
    assert [r["decode_worker_idx"] for r in by_arrival(report)] == [0, 1]
    assert transitions(report) == [(100.0, "planner_scale", [(1, "worker_draining")]),
                                   (125.0, "drain_settlement", [(1, "worker_removed")])]


def test_a_worker_ready_at_an_arrivals_time_takes_the_arrival():
    # a worker added at 100 with a 50 ms startup is ready at 150, before the arrival of 150 is
    # placed: round robin sends it to the new worker 1
    report = run_case("order_ready_takes_arrival")
    assert transitions(report) == [(100.0, "planner_scale", [(1, "worker_starting")]),
                                   (150.0, "worker_ready_event", [(1, "worker_ready")])]
    assert [(r["arrival_time_ms"], r["decode_worker_idx"]) for r in by_arrival(report)] == [
        (0.0, 0), (150.0, 1)]

"""An embedding program drives scaling through its own object (the reference's Python contract,
CLUSTER.md §3.1): ``run_replay(payload, scaling_policy=obj)`` with ``obj.initial_tick_ms()`` and
``obj.on_tick(snapshot)``. The object is asked at the right times with the reference's snapshot
(§3.8; the values compared with the snapshots the reference passed to its own policy in the
shared cases), its targets take effect (the lifecycle operations and the whole run match the
reference's), a malformed answer stops the run with one PluginError line, and a KV-router run
driven the same way releases its queued requests when the new worker becomes ready.
"""

import json
from pathlib import Path

import pytest

from aisimulate_core import run_replay
from aisimulate_core.errors import PluginError
from cluster_compare import compare, diff
from reference import HOST_KEYS
from test_cluster_cases import SHARED
from test_cluster_lifecycle import payload as fixture_payload

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT.parent / "shared" / "bench" / "cluster"
if not BENCH.is_dir():
    pytest.skip(f"{BENCH} is not beside the checkout", allow_module_level=True)

# CLUSTER.md §3.8: the keys of the wheel's snapshot
REFERENCE_KEYS = {"tick_ordinal", "now_ms", "prefill_fpm_snapshots", "decode_fpm_snapshots",
                  "traffic"} | {f"{state}_{pool}_{what}"
                                for state in ("active", "starting", "draining")
                                for pool in ("prefill", "decode") for what in ("count", "ids")} \
    | {f"{kind}_{pool}_count" for kind in ("non_draining", "total")
       for pool in ("prefill", "decode")}

# the shared cases with a schedule, and the telemetry interval their reference output used
SCHEDULED = {name: SHARED[name] for name in ("s1_schedule_scaling_agg_rr",
                                             "s2_schedule_scaling_disagg_rr",
                                             "k5_kv_router_queue_scaling")}


class EmbeddedSchedule:
    """The embedding program's own policy: targets at fixed times, remembering every snapshot
    it was given (as JSON, so later changes by the runtime could not hide)."""

    def __init__(self, ticks):
        self.ticks = ticks          # [(at_ms, target_prefill, target_decode)]
        self.snapshots = []

    def initial_tick_ms(self):
        return self.ticks[0][0]

    def on_tick(self, snapshot):
        self.snapshots.append(json.loads(json.dumps(snapshot)))
        i = len(self.snapshots) - 1
        _, prefill, decode = self.ticks[i]
        following = self.ticks[i + 1][0] if i + 1 < len(self.ticks) else None
        return {"target_prefill": prefill, "target_decode": decode, "next_tick_ms": following}


def shared_case(name):
    """A shared case's payload without its scaling provider (the embedded object replaces it),
    its schedule as the object's ticks, and the reference's output."""
    loaded = json.loads((BENCH / f"{name}.json").read_text())
    loaded["traffic"]["trace_path"] = str((ROOT / loaded["traffic"]["trace_path"]).resolve())
    scaling = loaded["spec"]["adapters"].pop("scaling")
    ticks = [(t["at_ms"], t.get("prefill_target"), t.get("decode_target"))
             for t in scaling["config"]["ticks"]]
    return loaded, ticks, json.loads((BENCH / f"{name}.expected.json").read_text())


def drive(name, **kwargs):
    loaded, ticks, theirs = shared_case(name)
    policy = EmbeddedSchedule(ticks)
    report = run_replay(loaded, scaling_policy=policy, **kwargs)
    return report, policy, theirs


def without_fpm(snapshot):
    return {k: v for k, v in snapshot.items() if not k.endswith("_fpm_snapshots")}


def test_the_reference_keys_are_the_documented_list():
    _, _, theirs = shared_case("s1_schedule_scaling_agg_rr")
    assert {frozenset(s) for s in theirs["scaling_snapshots"]} == {frozenset(REFERENCE_KEYS)}


@pytest.mark.parametrize("name", sorted(SCHEDULED))
def test_on_tick_is_asked_at_the_ticks_with_the_references_snapshot(name):
    report, policy, theirs = drive(name)
    reference = theirs["scaling_snapshots"]
    assert [(s["tick_ordinal"], s["now_ms"]) for s in policy.snapshots] == [
        (i, at) for i, (at, _, _) in enumerate(policy.ticks)]
    assert [(s["tick_ordinal"], s["now_ms"]) for s in reference] == [
        (s["tick_ordinal"], s["now_ms"]) for s in policy.snapshots]
    for snapshot in policy.snapshots:
        assert REFERENCE_KEYS <= set(snapshot)
    # every value but the FPM rows (test_fpm_rows_are_the_references) as the reference gave it
    problems = []
    for ours, ref in zip(policy.snapshots, reference):
        diff(without_fpm({k: ours[k] for k in ref}), without_fpm(ref),
             f"$.scaling_snapshots[{ref['tick_ordinal']}]", problems)
    assert problems == []


@pytest.mark.parametrize("name", sorted(SCHEDULED))
def test_fpm_rows_are_the_references(name):
    _, policy, theirs = drive(name)
    problems = []
    for ours, ref in zip(policy.snapshots, theirs["scaling_snapshots"]):
        for key in ("prefill_fpm_snapshots", "decode_fpm_snapshots"):
            diff(ours[key], ref[key], f"$.scaling_snapshots[{ref['tick_ordinal']}].{key}",
                 problems)
    assert problems == []


class EmbeddedScheduleWithoutMetrics(EmbeddedSchedule):
    reads_pass_metrics = False


@pytest.mark.parametrize("name", sorted(SCHEDULED))
def test_a_policy_that_reads_no_pass_metrics_gets_none_and_the_same_run(name):
    loaded, ticks, _ = shared_case(name)
    watched, blind = EmbeddedSchedule(ticks), EmbeddedScheduleWithoutMetrics(ticks)
    full = run_replay(loaded, scaling_policy=watched)
    fast = run_replay(loaded, scaling_policy=blind)
    assert any(s["prefill_fpm_snapshots"] or s["decode_fpm_snapshots"] for s in watched.snapshots)
    assert all(s["prefill_fpm_snapshots"] == s["decode_fpm_snapshots"] == []
               for s in blind.snapshots)
    assert [without_fpm(s) for s in blind.snapshots] == [without_fpm(s) for s in watched.snapshots]
    def simulated(summary):
        return {k: v for k, v in summary.items() if k not in HOST_KEYS}
    assert simulated(fast.summary) == simulated(full.summary)
    assert fast.per_request == full.per_request


@pytest.mark.parametrize("name", sorted(SCHEDULED))
def test_the_objects_targets_take_effect(name):
    report, _, theirs = drive(name, telemetry_interval_ms=SCHEDULED[name])
    # the operations, records and samples the reference's own schedule policy gave
    assert compare(report.summary, report.per_request, theirs,
                   samples=report.telemetry["samples"],
                   relabel_workers=name.startswith("k")) == []
    planned = [op for op in report.summary["lifecycle_operations"] if op["cause"] == "planner_scale"]
    assert planned and all(op["planner_tick_ordinal"] is not None for op in planned)


def test_a_target_scales_the_pool_the_object_names():
    # three workers wanted at 100 in a five-request run (no startup delay): ids 1 and 2 at once
    policy = EmbeddedSchedule([(100.0, None, 3), (300.0, 7, None)])  # prefill ignored (agg)
    report = run_replay(fixture_payload("ticks_while_work"), scaling_policy=policy)
    (op,) = report.summary["lifecycle_operations"]
    assert (op["at_ms"], op["planner_tick_ordinal"]) == (100.0, 0)
    assert [(t["worker_id"], t["transition"]) for t in op["transitions"]] == [
        (1, "worker_ready"), (2, "worker_ready")]
    # the arrival of 100 is placed before the tick (worker 0); round robin then cycles 1, 2, 0
    assert [r["decode_worker_idx"] for r in sorted(report.per_request,
                                                   key=lambda r: r["arrival_time_ms"])] == [
        0, 0, 1, 2, 0]
    assert policy.snapshots[1]["active_decode_ids"] == [0, 1, 2]
    assert policy.snapshots[1]["non_draining_decode_count"] == 3


class Answers:
    """A policy answering ``answer`` at its first tick (50 ms)."""

    def __init__(self, answer):
        self.answer = answer

    def initial_tick_ms(self):
        return 50.0

    def on_tick(self, snapshot):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def failure(answer):
    with pytest.raises(PluginError) as error:
        run_replay(fixture_payload("ticks_while_work"), scaling_policy=Answers(answer))
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("answer, message", [
    ({"target_decode": 2, "next_tick_ms": None},
     "scaling policy Answers: on_tick() returned no target_prefill"),
    ({"target_prefill": None, "target_decode": 2.0, "next_tick_ms": None},
     "scaling policy Answers: on_tick() returned target_decode 2.0, expected an integer >= 0 "
     "or None"),
    (None, "scaling policy Answers: on_tick() returned NoneType, expected a dict with "
           "target_prefill, target_decode and next_tick_ms"),
    ({"target_prefill": None, "target_decode": -1, "next_tick_ms": None},
     "scaling policy Answers: on_tick() returned target_decode -1, expected an integer >= 0 "
     "or None"),
    ({"target_prefill": None, "target_decode": True, "next_tick_ms": None},
     "scaling policy Answers: on_tick() returned target_decode True, expected an integer >= 0 "
     "or None"),
    (KeyError("target_decode"),
     "scaling policy Answers: on_tick() raised KeyError: 'target_decode'"),
])
def test_a_bad_answer_is_one_plugin_error_line(answer, message):
    assert failure(answer) == message


def test_a_bad_next_tick_names_the_policy_and_the_key():
    message = failure({"target_prefill": None, "target_decode": None, "next_tick_ms": "soon"})
    assert message.startswith("scaling policy Answers: on_tick() returned next_tick_ms 'soon'")


def test_extra_keys_in_an_answer_are_ignored():
    policy = Answers({"target_prefill": None, "target_decode": 2, "next_tick_ms": None,
                      "reason": "burst"})
    report = run_replay(fixture_payload("ticks_while_work"), scaling_policy=policy)
    assert [op["at_ms"] for op in report.summary["lifecycle_operations"]] == [50.0]


def test_a_kv_router_run_releases_its_queue_when_the_new_worker_is_ready():
    # k5: one worker with the router's pending queue on; the object scales to 2 at 12 ms, the
    # new worker (18 ms startup) is ready at 30 and takes requests queued until then
    report, policy, theirs = drive("k5_kv_router_queue_scaling")
    ready = [op for op in report.summary["lifecycle_operations"]
             if op["cause"] == "worker_ready_event"]
    assert [(op["at_ms"], op["origin_operation_ordinal"]) for op in ready] == [(30.0, 0)]
    released = ready[0]["topology_released_request_uuids"]
    assert len(released) == 3
    queued_until_30 = sorted(r["uuid"] for r in report.per_request
                             if r["routing_history"][0]["outcome"] == "queued"
                             and r["routing_history"][0]["released_at_ms"] == 30.0)
    assert sorted(released) == queued_until_30
    assert [len(op["topology_released_request_uuids"])
            for op in theirs["lifecycle_operations"]] == [0, 3, 0, 0]
    assert [s["now_ms"] for s in policy.snapshots] == [12.0, 90.0]


def test_a_target_beyond_the_rank_bound_is_one_error():
    # a policy asking for 10^9 workers: one line, not a loop allocating a billion workers
    from aisimulate_core.errors import SimulationError

    policy = Answers({"target_prefill": None, "target_decode": 10 ** 9, "next_tick_ms": None})
    with pytest.raises(SimulationError) as error:
        run_replay(fixture_payload("ticks_while_work"), scaling_policy=policy)
    assert str(error.value) == (
        "scaling policy Answers: at 50 ms the agg pool's target adds 999999999 workers of 1 "
        "ranks to the 1 ranks live; at most 65536 ranks may run at once")

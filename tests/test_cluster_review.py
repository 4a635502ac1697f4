"""Defects found by the review of the cluster layer (scaling, routers, telemetry), each shown by a
small run (each failed before its fix). The control tests next to them show that the same
setting behaves as it should when the defect's condition is absent.

The payloads are vLLM workers with fixed timing (10 ms prefill, 5 ms decode) on the traces of
tests/fixtures/review9/.
"""

import copy
import json
from pathlib import Path

import pytest

from aisimulate_core import Prompt, SimRequest, build_simulation, load_payload, run_replay
from aisimulate_core.errors import AisimError, PluginError, SimulationError
from aisimulate_core.hookspecs import hookimpl
from aisimulate_core.plugins import make_plugin_manager

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "review9"


def aggregated(trace, *, workers=1, dp_size=1, placement="round_robin", ticks=None):
    """An aggregated payload on ``trace`` (a file of tests/fixtures/review9/), scaled by a
    ``schedule`` of ``ticks`` when given."""
    payload = {
        "spec": {
            "version": 1,
            "topology": {"kind": "aggregated", "workers": {"initial_workers": workers}},
            "engine": {"dp_size": dp_size, "tensor_parallel_size": 1,
                       "rank": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 1024,
                                "max_num_seqs": 4, "max_num_batched_tokens": 8192,
                                "timing_model": {"type": "fixed", "prefill_ms": 10.0,
                                                 "decode_ms": 5.0}}},
            "adapters": {"placement": {"provider": placement}},
            "record_per_request": True,
        },
        "traffic": {"source_type": "trace", "trace_path": str(FIXTURES / trace),
                    "trace_format": "mooncake", "trace_block_size": 16},
    }
    if ticks is not None:
        payload["spec"]["adapters"]["scaling"] = {"provider": "schedule",
                                                  "config": {"ticks": ticks}}
    return payload


# ---------------------------------------------------------------------- the rank bound
# runtime/cluster.py Cluster._check_size takes a worker's rank count from a live worker of the
# pool, and 1 when the pool has none: once a DP pool has been scaled to 0, scaling it up again
# is checked as if each worker had one rank. The bound is lowered to 8 ranks (both places that
# hold it) so that the run stays tiny; the same check on a non-empty pool (the control) errs.

@pytest.fixture
def eight_ranks(monkeypatch):
    import aisimulate_core.runtime.cluster as cluster
    import aisimulate_core.spec.bounds as bounds

    monkeypatch.setattr(bounds, "MAX_RANKS", 8)
    monkeypatch.setattr(cluster, "MAX_RANKS", 8)


def test_control_scaling_a_live_dp_pool_past_the_rank_bound_is_one_error(eight_ranks):
    # one worker of 4 ranks, 3 more asked for at 50 ms: 16 ranks > 8
    payload = aggregated("two_apart.jsonl", dp_size=4, ticks=[{"at_ms": 50.0, "decode_target": 4}])
    with pytest.raises(SimulationError) as error:
        run_replay(payload)
    assert "at most 8 ranks may run at once" in str(error.value)


def test_scaling_an_emptied_dp_pool_past_the_rank_bound_is_one_error(eight_ranks):
    # the worker drains at 0 and is removed at 45 when its request ends; at 50 ms 3 workers of
    # 4 ranks (12 > 8) are asked for: the run must stop there, not start 12 ranks
    payload = aggregated("two_apart.jsonl", dp_size=4,
                         ticks=[{"at_ms": 0.0, "decode_target": 0},
                                {"at_ms": 50.0, "decode_target": 3}])
    with pytest.raises(SimulationError) as error:
        run_replay(payload)
    assert "adds 3 workers of 4 ranks" in str(error.value)
    assert "at most 8 ranks may run at once" in str(error.value)


# ---------------------------------------------------------------------- a policy without on_tick
# guards.scaling_policy checks only initial_tick_ms() of a registered provider (build.py checks
# both methods of an embedded object), and Cluster.tick_due reads ``self.policy.on_tick`` before
# its _call guard: a registered policy without on_tick ends the run with an AttributeError
# traceback at its first tick.

class TickOnly:
    NAME = "tick_only"

    def __init__(self, config):
        pass

    def initial_tick_ms(self):
        return 10.0


class RegistersTickOnly:
    @hookimpl
    def aisimulate_register_scaling_policies(self, register):
        register(TickOnly)


def test_control_an_embedded_policy_without_on_tick_is_one_error():
    with pytest.raises(AisimError) as error:
        run_replay(aggregated("ten.jsonl"), scaling_policy=TickOnly({}))
    assert str(error.value) == ("scaling policy TickOnly: needs initial_tick_ms() and "
                                "on_tick(snapshot); on_tick() missing on a TickOnly")


def test_a_registered_policy_without_on_tick_is_one_plugin_error():
    payload = aggregated("ten.jsonl")
    payload["spec"]["adapters"]["scaling"] = {"provider": "tick_only"}
    manager = make_plugin_manager(plugins=[RegistersTickOnly()])
    with pytest.raises(PluginError) as error:
        run_replay(payload, plugin_manager=manager)
    assert "on_tick" in str(error.value)
    assert "\n" not in str(error.value)


# ---------------------------------------------------------------------- submit() that fails
# Simulation.submit promises "nothing of the simulation changes then" for a request it refuses,
# but a placement failure (round robin with no active worker) comes after _register_arrival:
# the refused request stays counted as arrived and in flight, and the run can never finish.

def emptied_then_refilled():
    """One worker drained at 0 (removed at 45), a new one at 60; requests at 0 and 100."""
    return aggregated("two_apart.jsonl", ticks=[{"at_ms": 0.0, "decode_target": 0},
                                                {"at_ms": 60.0, "decode_target": 1}])


def late_request():
    return SimRequest(0, Prompt.from_tokens(range(1000, 1016)), 2, 0.0, request_id="late")


def test_control_the_emptied_pool_completes_its_trace():
    report = run_replay(emptied_then_refilled())
    assert report.summary["completed_requests"] == 2


def test_a_refused_submission_leaves_the_run_as_it_was():
    sim = build_simulation(load_payload(json.dumps(emptied_then_refilled())))
    sim.run_until(50.0)          # no worker is active between 45 and 60
    with pytest.raises(SimulationError) as error:
        sim.submit(late_request())
    assert str(error.value) == ("request 2: no active workers for round-robin placement in the "
                                "agg pool")
    assert (sim.arrived, sim.in_flight) == (1, 0)
    sim.run()
    report = sim.report()
    assert report.summary["completed_requests"] == 2
    assert report.summary["num_requests"] == 2


# ---------------------------------------------------------------------- a stuck run keeps ticking
# Simulation._cluster_time keeps telemetry samples and scaling ticks coming while a request is
# in flight, even when nothing else can ever happen (a router queue with no worker, requests
# stranded between the pools). Without telemetry such a run stops at once with one clear
# SimulationError (_check_drained); with telemetry it samples on to MAX_SAMPLES (a million
# samples, some 20 s, then an error blaming the interval), and with a policy that ticks forever
# it never ends. The tests bound the run by a callback that raises after a fixed number of calls.

QUEUE = {"router_queue_threshold": 0.01}


def stuck_queue(**kwargs):
    """Requests every 10 ms; the only worker drains at 15 ms and none ever comes back, so the
    KV router's queue keeps what arrives after that for ever."""
    payload = aggregated("ten.jsonl", placement="kv_router", **kwargs)
    payload["spec"]["adapters"]["placement"]["config"] = QUEUE
    return payload


class Bounded:
    """A callback that raises on its ``cap + 1``-th call (the test's guard against a run that
    does not end)."""

    def __init__(self, cap):
        self.calls = 0
        self.cap = cap

    def __call__(self, *args):
        self.calls += 1
        if self.calls > self.cap:
            raise RuntimeError(f"called {self.calls} times")


STUCK = "requests wait in the agg pool's router queue and no worker will ever take them"


def test_control_a_stuck_queue_without_telemetry_is_one_error():
    with pytest.raises(SimulationError) as error:
        run_replay(stuck_queue(ticks=[{"at_ms": 15.0, "decode_target": 0}]))
    assert STUCK in str(error.value)


def test_a_stuck_queue_with_telemetry_is_the_same_one_error():
    on_sample = Bounded(1000)
    with pytest.raises(SimulationError) as error:
        run_replay(stuck_queue(ticks=[{"at_ms": 15.0, "decode_target": 0}]),
                   telemetry_interval_ms=10.0, on_sample=on_sample)
    assert STUCK in str(error.value)
    assert on_sample.calls <= 20          # the samples up to the last arrival, at 90 ms


class DrainsThenWaits:
    """Scales the pool to 0 at its first tick, then asks every 10 ms and never scales again."""

    def __init__(self, cap):
        self.asked = Bounded(cap)

    def initial_tick_ms(self):
        return 15.0

    def on_tick(self, snapshot):
        self.asked()
        first = self.asked.calls == 1
        return {"target_prefill": None, "target_decode": 0 if first else None,
                "next_tick_ms": snapshot["now_ms"] + 10.0}


def test_a_policy_ticking_for_ever_on_a_stuck_queue_ends_with_one_error():
    policy = DrainsThenWaits(50_000)      # about half a second of ticks
    with pytest.raises(SimulationError) as error:
        run_replay(stuck_queue(), scaling_policy=policy)
    assert STUCK in str(error.value)


# ---------------------------------------------------------------------- samples move the stop time
# Under a max_sim_time_ms cutoff the run stops at its last arrival, pass completion or tick at
# or before the cutoff (CLUSTER.md §3.6), and periodic samples come only while k·I <= that stop
# time (§4). Here a periodic sample is a step of its own: one due after the last pass completion
# but before the cutoff moves the clock, so the run "stops" at the sample and every worker is
# billed up to it: asking for telemetry changes decode_worker_seconds. The case is the recorded
# ws_cutoff_busy (cutoff 312, last pass completion 310) sampled every 311 ms; the reference's
# output is tests/fixtures/review9/ws_cutoff_busy.i311.expected.json (see README.md there).

def test_control_the_cutoff_case_without_telemetry_stops_at_its_last_pass():
    from test_cluster_lifecycle import run_case

    assert run_case("ws_cutoff_busy").summary["decode_worker_seconds"] == pytest.approx(
        0.310 + 0.260, rel=1e-12)


def test_a_sample_before_the_cutoff_does_not_move_the_stop_time():
    from cluster_compare import compare
    from test_cluster_lifecycle import run_case

    theirs = json.loads((FIXTURES / "ws_cutoff_busy.i311.expected.json").read_text())
    report = run_case("ws_cutoff_busy", telemetry_interval_ms=311.0)
    samples = report.telemetry["samples"]
    assert [(s["kind"], s["sampled_at_ms"]) for s in samples] == [("baseline", 0.0),
                                                                 ("final", 310.0)]
    assert report.summary["decode_worker_seconds"] == theirs["decode_worker_seconds"]
    assert compare(report.summary, report.per_request, theirs, samples=samples) == []

"""The ``load`` scaling policy: its decisions on sequences of snapshots, its configuration
errors, and whole runs through ``run_replay`` that scale a pool up on a burst and back down."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from aisimulate_core import load_payload, run_replay
from aisimulate_core.errors import ConfigError
from aisimulate_core.runtime.load_scaling import LoadScaling
from test_semantics_cases import bare_spec, req

ROOT = pathlib.Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------- snapshots
def snap(now, active=(0,), starting=(), draining=(), waiting=0, kv=0.0, pending=0, pool="decode",
         metrics=True, fpm=None, **extra):
    """A scaling snapshot (CLUSTER.md §3.8 plus the scheduler rows) of one pool; ``waiting`` and
    ``kv`` are per active worker (one value for all, or a list)."""
    active, starting, draining = list(active), list(starting), list(draining)
    waiting = waiting if isinstance(waiting, list) else [waiting] * len(active)
    kv = kv if isinstance(kv, list) else [kv] * len(active)
    s = {"tick_ordinal": 0, "now_ms": float(now), "traffic": {}}
    for p in ("prefill", "decode"):
        mine = p == pool
        for state, ids in (("active", active), ("starting", starting), ("draining", draining)):
            s[f"{state}_{p}_ids"] = ids if mine else []
            s[f"{state}_{p}_count"] = len(ids) if mine else 0
        s[f"non_draining_{p}_count"] = len(active) + len(starting) if mine else 0
        s[f"total_{p}_count"] = len(active) + len(starting) + len(draining) if mine else 0
        s[f"{p}_fpm_snapshots"] = (fpm or []) if mine else []
        if metrics:
            s[f"{p}_scheduler_metrics"] = [
                {"worker_id": w, "dp_rank": 0, "active_blocks": 0, "inactive_blocks": 0,
                 "total_blocks": 100, "active_cache_usage": u, "physical_cache_usage": u,
                 "running_requests": 0, "waiting_requests": q}
                for w, q, u in zip(active, waiting, kv)] if mine else []
            s[f"router_pending_{p}_requests"] = pending if mine else 0
    s.update(extra)
    return s


def targets(policy, snapshots, key="target_decode"):
    return [policy.on_tick(s)[key] for s in snapshots]


# ---------------------------------------------------------------------- ticks
def test_ticks_every_interval_from_interval_ms():
    policy = LoadScaling({"interval_ms": 250})
    assert policy.initial_tick_ms() == 250.0
    answer = policy.on_tick(snap(250))
    assert answer == {"target_prefill": None, "target_decode": None, "next_tick_ms": 500.0}
    assert LoadScaling({}).initial_tick_ms() == 1000.0


def test_scale_up_on_queue_growth_over_a_full_window():
    policy = LoadScaling({"window_ticks": 3})
    # means over the window: not full, not full, (0+1+4)/3 = 1.67 <= 2, (1+4+6)/3 = 3.67 > 2
    assert targets(policy, [snap(t, waiting=q) for t, q in ((1, 0), (2, 1), (3, 4), (4, 6))]) \
        == [None, None, None, 2]


def test_router_pending_requests_count_as_queue():
    policy = LoadScaling({"window_ticks": 1})
    # 2 waiting + 3 pending on 2 workers: 2.5 per worker > 2.0
    assert policy.on_tick(snap(1, active=[0, 1], waiting=[2, 0], pending=3))["target_decode"] == 3
    policy = LoadScaling({"window_ticks": 1})
    assert policy.on_tick(snap(1, active=[0, 1], waiting=[2, 0], pending=1))["target_decode"] \
        is None


def test_scale_up_on_kv_usage_with_empty_queues():
    policy = LoadScaling({"window_ticks": 2})
    answers = targets(policy, [snap(t, active=[0, 1], kv=[0.9, 0.8]) for t in (1, 2)])
    assert answers == [None, 3]
    policy = LoadScaling({"window_ticks": 2, "max_kv_usage": 0.9})
    assert targets(policy, [snap(t, active=[0, 1], kv=[0.9, 0.8]) for t in (1, 2)]) \
        == [None, None]


def test_scale_up_step_is_what_brings_the_worst_signal_back_within_the_cap():
    config = {"window_ticks": 1, "scale_up_step": 4}
    # 5 requests queued on 2 workers: 2.5 each; 3 workers would hold them under 2.0
    assert LoadScaling(config).on_tick(snap(1, active=[0, 1], waiting=[3, 2]))["target_decode"] \
        == 3
    # 2 workers at 7 queued: 7 workers' worth, capped at 2 + 4
    assert LoadScaling(config).on_tick(snap(1, active=[0, 1], waiting=7))["target_decode"] == 6


def test_no_further_scale_up_while_a_worker_starts_and_a_fresh_window_after_it_is_ready():
    policy = LoadScaling({"window_ticks": 2})
    high = dict(waiting=5)
    assert targets(policy, [snap(1, **high), snap(2, **high)]) == [None, 2]
    # worker 1 starting: the capacity asked for is on its way
    assert targets(policy, [snap(t, active=[0], starting=[1], **high) for t in (3, 4, 5)]) \
        == [None, None, None]
    # ready: the window restarts with the new pool, then scales again if still loaded
    assert targets(policy, [snap(t, active=[0, 1], waiting=5) for t in (6, 7)]) == [None, 3]


def test_scale_down_after_scale_down_ticks_low_ticks_in_a_row():
    policy = LoadScaling({"window_ticks": 1, "scale_down_ticks": 3})
    low = dict(active=[0, 1, 2], waiting=0, kv=0.1)
    # the third low tick steps down; a tick between the watermarks restarts the count
    assert targets(policy, [snap(1, **low), snap(2, **low), snap(3, active=[0, 1, 2], kv=0.5),
                            snap(4, **low), snap(5, **low), snap(6, **low)]) \
        == [None, None, None, None, None, 2]
    # worker 2 draining: a new pool, a new window and a new count
    assert targets(policy, [snap(t, active=[0, 1], draining=[2], kv=0.1) for t in (7, 8, 9)]) \
        == [None, None, 1]


def test_scale_down_keeps_the_workers_still_needed():
    policy = LoadScaling({"window_ticks": 1, "scale_down_ticks": 1, "scale_down_step": 3})
    # KV 0.35 on 4 workers is 1.4 workers' worth: 1 worker would be at 1.4 > 0.8, 2 at 0.7
    assert policy.on_tick(snap(1, active=[0, 1, 2, 3], kv=0.35))["target_decode"] == 2
    policy = LoadScaling({"window_ticks": 1, "scale_down_ticks": 1, "scale_down_step": 3,
                          "min_workers": 3})
    assert policy.on_tick(snap(1, active=[0, 1, 2, 3], kv=0.0))["target_decode"] == 3


def test_scale_down_cancels_a_starting_worker_first():
    policy = LoadScaling({"window_ticks": 1, "scale_down_ticks": 1})
    # non-draining = active + starting = 3; the runtime removes the highest (starting) id
    assert policy.on_tick(snap(1, active=[0, 1], starting=[2]))["target_decode"] == 2


def test_min_and_max_workers_bound_every_target():
    assert LoadScaling({"min_workers": 2}).on_tick(snap(1))["target_decode"] == 2
    policy = LoadScaling({"max_workers": 3})
    assert policy.on_tick(snap(1, active=range(5)))["target_decode"] == 3
    policy = LoadScaling({"window_ticks": 1, "max_workers": {"decode": 2}, "scale_up_step": 4})
    assert policy.on_tick(snap(1, waiting=9))["target_decode"] == 2
    assert policy.on_tick(snap(2, active=[0, 1], waiting=9))["target_decode"] is None


def test_gpu_budget_caps_growth_and_counts_draining_workers():
    config = {"window_ticks": 1, "gpus_per_worker": 2, "gpu_budget": 7, "scale_up_step": 3}
    policy = LoadScaling(config)
    assert policy.on_tick(snap(1, active=[0, 1], waiting=9))["target_decode"] == 3
    policy = LoadScaling(config)
    assert policy.on_tick(snap(1, active=[0, 1], draining=[2], waiting=9))["target_decode"] \
        is None
    # the snapshot's GPUs per worker win over the configuration's
    policy = LoadScaling(config)
    answer = policy.on_tick(snap(1, active=[0, 1], waiting=9, decode_gpus_per_worker=1))
    assert answer["target_decode"] == 5


def test_gpu_budget_goes_to_the_pool_under_more_pressure():
    config = {"window_ticks": 1, "gpu_budget": 5}

    def both(prefill_waiting, decode_waiting):
        s = snap(1, active=[0, 1], waiting=decode_waiting)
        prefill = snap(1, active=[0, 1], waiting=prefill_waiting, pool="prefill")
        s.update({k: v for k, v in prefill.items() if "prefill" in k})
        return LoadScaling(config).on_tick(s)

    answer = both(3, 6)
    assert (answer["target_prefill"], answer["target_decode"]) == (None, 3)
    answer = both(6, 3)
    assert (answer["target_prefill"], answer["target_decode"]) == (3, None)


def test_aggregated_snapshots_never_target_prefill():
    policy = LoadScaling({"window_ticks": 1, "min_workers": 2})
    assert policy.on_tick(snap(1, waiting=9))["target_prefill"] is None


def test_per_pool_thresholds():
    policy = LoadScaling({"window_ticks": 1, "max_queue_per_worker": {"prefill": 0.5}})
    s = snap(1, waiting=1, pool="prefill")
    assert (policy.on_tick(s)["target_prefill"]) == 2
    policy = LoadScaling({"window_ticks": 1, "max_queue_per_worker": {"prefill": 0.5}})
    assert policy.on_tick(snap(1, waiting=1))["target_decode"] is None


def fpm_row(worker, queued_tokens=0, queued=0, rank=0):
    return {"worker_id": worker, "dp_rank": rank, "wall_time": 0.01, "num_queued_prefill": queued,
            "sum_queued_prefill_tokens": queued_tokens, "num_queued_decode": 0}


def test_queued_prefill_tokens_from_each_ranks_latest_fpm_row():
    policy = LoadScaling({"window_ticks": 2, "max_prefill_tokens_per_worker": 1000,
                          "max_queue_per_worker": None, "max_kv_usage": None})
    ticks = [snap(1, active=[0, 1], fpm=[fpm_row(0, 1500), fpm_row(1, 200)]),
             # worker 0 ran no pass since: its latest row (1500 queued) still counts
             snap(2, active=[0, 1], fpm=[fpm_row(1, 900)])]
    assert targets(policy, ticks) == [None, 3]    # ((1700 + 2400) / 2) / 2 = 1025 > 1000


def test_without_scheduler_rows_the_queue_comes_from_fpm_rows():
    policy = LoadScaling({"window_ticks": 1})
    s = snap(1, active=[0, 1], metrics=False, fpm=[fpm_row(0, queued=3), fpm_row(1, queued=2)])
    assert policy.on_tick(s)["target_decode"] == 3


def test_a_snapshot_without_signals_changes_nothing():
    policy = LoadScaling({"window_ticks": 1, "scale_down_ticks": 1})
    bare = snap(1, active=[0, 1, 2], metrics=False)
    del bare["decode_fpm_snapshots"]
    assert targets(policy, [dict(bare, now_ms=float(t)) for t in range(1, 6)]) == [None] * 5


# ---------------------------------------------------------------------- configuration
def test_every_config_problem_is_one_line_reported_together():
    with pytest.raises(ConfigError) as caught:
        LoadScaling({"window": 3, "interval_ms": 0, "max_kv_usage": 1.5,
                     "min_queue_per_worker": 2.0, "min_workers": {"decode": 3, "agg": 1},
                     "max_workers": 2, "gpu_budget": 0, "scale_up_step": True})
    path = "$.spec.adapters.scaling.config"
    assert str(caught.value).splitlines() == [
        f"{path}.window: unknown field",
        f"{path}.interval_ms: must be a finite number > 0, got 0",
        f"{path}.scale_up_step: must be an integer >= 1, got True",
        f"{path}.gpu_budget: must be an integer >= 1, got 0",
        f"{path}.min_workers.agg: unknown pool (prefill or decode)",
        f"{path}.min_workers.decode: must not exceed max_workers (2), got 3",
        f"{path}.min_queue_per_worker: must be below max_queue_per_worker (2.0), got 2.0",
        f"{path}.max_kv_usage: must be a number in (0, 1] or null, got 1.5",
    ]


def test_a_low_watermark_needs_its_signal_and_one_signal_must_be_on():
    with pytest.raises(ConfigError) as caught:
        LoadScaling({"max_queue_per_worker": None, "max_kv_usage": None,
                     "min_prefill_tokens_per_worker": 10})
    path = "$.spec.adapters.scaling.config"
    assert str(caught.value).splitlines() == [
        f"{path}.min_prefill_tokens_per_worker: needs max_prefill_tokens_per_worker set, got 10",
        f"{path}: needs at least one signal on (max_queue_per_worker, max_kv_usage or "
        f"max_prefill_tokens_per_worker), got none",
    ]


def test_low_watermarks_default_to_half_the_high_ones():
    pool = LoadScaling({"max_prefill_tokens_per_worker": 4096}).pools["decode"]
    assert pool.high == {"queue": 2.0, "kv": 0.8, "prefill_tokens": 4096}
    assert pool.low == {"queue": 1.0, "kv": 0.4, "prefill_tokens": 2048.0}


# ---------------------------------------------------------------------- whole runs
def burst_spec(scaling, workers=1, startup_delay_ms=0.0):
    """A burst of 30 requests in 300 ms on a 2-sequence engine, then a trickle until 4000 ms
    (the trickle keeps the run, hence the ticks, going after the burst)."""
    burst = [req(i, 64, 40, t=10.0 * i) for i in range(30)]
    trickle = [req(100 + i, 16, 10, t=1000.0 + 200.0 * i) for i in range(16)]
    spec = bare_spec(burst + trickle, max_num_seqs=2)
    spec["topology"]["workers"] = {"initial_workers": workers,
                                   "startup_delay_ms": startup_delay_ms}
    spec["adapters"] = {"scaling": scaling}
    return json.dumps(spec)


LOAD = {"provider": "load",
        "config": {"interval_ms": 100, "window_ticks": 2, "scale_down_ticks": 3,
                   "max_workers": 4}}


def transitions(summary):
    return [(op["at_ms"], op["cause"], [(t["worker_id"], t["transition"]) for t in op["transitions"]])
            for op in summary["lifecycle_operations"]]


def test_a_burst_scales_the_pool_up_then_back_down():
    scaled = run_replay(burst_spec(LOAD)).summary
    ops = transitions(scaled)
    assert ops[:3] == [(200.0, "planner_scale", [(1, "worker_ready")]),
                       (400.0, "planner_scale", [(2, "worker_ready")]),
                       (600.0, "planner_scale", [(3, "worker_ready")])]
    drained = [w for _, cause, moves in ops[3:] for w, move in moves if move == "worker_draining"]
    assert drained == [3, 2, 1]
    assert scaled["lifecycle_operations"][-1]["state_after_batch"]["active"] == [0]
    fixed = run_replay(burst_spec({"provider": "none"}, workers=4)).summary
    assert scaled["completed_requests"] == fixed["completed_requests"] == 46
    assert scaled["decode_worker_seconds"] < 0.8 * fixed["decode_worker_seconds"]


def test_a_startup_delay_holds_further_scale_ups_until_the_worker_is_ready():
    # ready at 450; the window restarts at the tick at 500 and is full again at 600
    summary = run_replay(burst_spec(LOAD, startup_delay_ms=250.0)).summary
    ops = transitions(summary)
    assert ops[:3] == [(200.0, "planner_scale", [(1, "worker_starting")]),
                       (450.0, "worker_ready_event", [(1, "worker_ready")]),
                       (600.0, "planner_scale", [(2, "worker_starting")])]


def test_bad_config_in_a_payload_is_one_line_per_problem():
    bad = dict(LOAD, config={"interval_ms": -1, "max_wokers": 3})
    with pytest.raises(ConfigError) as caught:
        run_replay(burst_spec(bad))
    assert str(caught.value).splitlines() == [
        "$.spec.adapters.scaling.config.max_wokers: unknown field",
        "$.spec.adapters.scaling.config.interval_ms: must be a finite number > 0, got -1",
    ]


@pytest.mark.parametrize("name", ["mooncake_fixed_pool.json", "mooncake_load_autoscaler.json"])
def test_the_mooncake_study_payloads_load(name):
    payload = load_payload((ROOT / "examples" / name).read_text())
    assert payload.spec.sla.is_set


def disaggregated_burst(config):
    """The burst on 1 prefill worker and 1 decode worker whose engine runs 2 sequences."""
    def rank(seqs):
        return {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 1024, "max_num_seqs": seqs,
                "max_num_batched_tokens": 8192,
                "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 5.0}}
    spec = json.loads(burst_spec(LOAD))
    spec["topology"] = {"kind": "disaggregated", "prefill": {"initial_workers": 1},
                        "decode": {"initial_workers": 1}}
    spec["engine"] = {"prefill": {"rank": rank(128)}, "decode": {"rank": rank(2)}}
    spec["adapters"]["scaling"] = {"provider": "load", "config": config}
    return json.dumps(spec)


def test_disaggregated_pools_scale_on_their_own_signals_within_the_gpu_budget():
    config = dict(LOAD["config"])
    unbounded = run_replay(disaggregated_burst(config)).summary
    pools = [(op["pool"], op["cause"]) for op in unbounded["lifecycle_operations"]]
    # the decode engines queue; the prefill worker never does
    assert {pool for pool, _ in pools} == {"decode"}
    assert pools[:3] == [("decode", "planner_scale")] * 3
    budget = run_replay(disaggregated_burst(dict(config, gpu_budget=3))).summary
    ops = transitions(budget)
    # 1 prefill + 2 decode GPUs: one decode worker more, then the budget holds
    assert [moves for _, cause, moves in ops if cause == "planner_scale"] \
        == [[(1, "worker_ready")], [(1, "worker_draining"), (1, "worker_removed")]]
    assert budget["decode_worker_seconds"] < unbounded["decode_worker_seconds"]


def test_the_autoscaled_burst_is_the_same_on_both_backends():
    script = ("import sys; from aisimulate_core import run_replay; "
              "from aisimulate_core.native import BACKEND; s = run_replay(sys.stdin.read()).summary; "
              "print(BACKEND, s['lifecycle_operations'], s['decode_worker_seconds'])")
    outputs = []
    for backend in ("c", "python"):
        env = dict(os.environ, AISIMULATE_BACKEND=backend)
        done = subprocess.run([sys.executable, "-c", script], input=burst_spec(LOAD), env=env,
                              cwd=ROOT, capture_output=True, text=True, check=True)
        outputs.append(done.stdout.split(" ", 1))
    assert [backend for backend, _ in outputs] == ["c", "python"]
    assert outputs[0][1] == outputs[1][1]

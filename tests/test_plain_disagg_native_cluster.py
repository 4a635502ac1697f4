"""Scheduled scaling (with round robin or the C kv_router) inside the plain disaggregated C loop (runtime/plain_disagg_native.py's
_Scaling, csrc/plain_disagg.c's pauses) against its twin, runtime/disaggregated.py's Python loop.

Seeded random payloads of test_plain_disagg_native (both pools' sizes, small decode pools,
transfers, arrivals, sessions, traces, timing, SLAs, cutoffs, records) with a random
``schedule`` of both pools' targets (up and down, never to none), startup delays in either
pool (starting workers cancelled, ready ones taking placements) and drains of busy workers
(held sources, pending and reserved destinations), must give the same report (the lifecycle
operations and worker seconds with it; its records too, kept or streamed) or the same error
line both ways; the C loop must have run.
"""

from __future__ import annotations

import json
import random

import pytest

from aisimulate_core import native
from aisimulate_core.runtime import plain_disagg_native
from test_plain_disagg_native import (  # noqa: F401  (counted: the fixture)
    _BENCH, _kv_router, _random_payload, both_ways, counted)

pytestmark = pytest.mark.skipif(native.lib is None or native.resolve_backend() != "c",
                                reason="the C loop runs on the C backend")

CASES = 200


def _scaled(rng, payload):
    """``payload`` with a random schedule of both pools' targets and startup delays."""
    spec = payload["spec"]
    horizon = rng.choice([20.0, 100.0, 400.0, 2000.0])
    ticks = {}
    for _ in range(rng.randint(1, 6)):
        # (whole ms often: ticks meet arrivals, completions, transfers and workers ready)
        at = round(rng.uniform(0.0, horizon), rng.choice([0, 0, 1, 3]))
        tick = ticks.setdefault(at, {"at_ms": at})
        for pool in ("prefill", "decode"):
            if rng.random() < 0.7:
                tick[f"{pool}_target"] = rng.choice([1, 1, 2, 2, 3, 4])
    spec["adapters"]["scaling"] = {"provider": "schedule",
                                   "config": {"ticks": sorted(ticks.values(),
                                                              key=lambda t: t["at_ms"])}}
    for pool in ("prefill", "decode"):
        if rng.random() < 0.7:
            spec["topology"][pool]["startup_delay_ms"] = rng.choice([0.0, 0.5, 5.0, 35.0,
                                                                     120.0])
    return payload


def test_random_scaled_runs_match_the_python_loop(monkeypatch, counted, tmp_path):
    rng = random.Random(20261206)
    ran = operations = 0
    for case in range(CASES):
        payload = _scaled(rng, _random_payload(rng, tmp_path, case))
        report, took = both_ways(monkeypatch, counted, payload, streamed=rng.random() < 0.25)
        ran += took
        if isinstance(report, dict):
            operations += len(report.get("lifecycle_operations") or ())
    assert ran > CASES * 0.9
    assert operations > CASES   # (the schedules did change the pools)


def test_random_scaled_kv_router_runs_match_the_python_loop(monkeypatch, counted, tmp_path):
    # the C kv_router of each pool under scaling: its candidates follow the workers (its
    # Python notifications sync them at each pause), new prefill ranks report to it
    rng = random.Random(20261207)
    ran = operations = 0
    cases = 100
    for case in range(cases):
        payload = _scaled(rng, _random_payload(rng, tmp_path, case))
        payload["spec"]["adapters"]["placement"] = _kv_router(rng)
        report, took = both_ways(monkeypatch, counted, payload, streamed=rng.random() < 0.25)
        ran += took
        if isinstance(report, dict):
            operations += len(report.get("lifecycle_operations") or ())
    assert ran > cases * 0.9
    assert operations > cases


def test_the_s2_case_runs_in_c(monkeypatch, counted):
    # the cluster bench's disaggregated schedule: 2p/1d -> 3p/3d (decode startup 25 ms) ->
    # 1 prefill (two drain) -> 1 decode, records kept, a trace
    cluster = _BENCH / "cluster"
    payload = json.loads((cluster / "s2_schedule_scaling_disagg_rr.json").read_text())
    payload["traffic"]["trace_path"] = str(cluster / "data" / "s2_scale_disagg.jsonl")
    report, took = both_ways(monkeypatch, counted, payload)
    assert took == 1 and report["completed_requests"] == len(report["per_request"]) > 0
    assert report["lifecycle_operations"]


def test_schedules_that_may_empty_a_pool_keep_the_python_loop(monkeypatch, counted):
    # an empty pool parks its placements in the router, which the C loop does not
    cluster = _BENCH / "cluster"
    payload = json.loads((cluster / "s2_schedule_scaling_disagg_rr.json").read_text())
    payload["traffic"]["trace_path"] = str(cluster / "data" / "s2_scale_disagg.jsonl")
    payload["spec"]["adapters"]["scaling"]["config"]["ticks"].append(
        {"at_ms": 400.0, "prefill_target": 0})
    both_ways(monkeypatch, counted, payload)
    assert counted.calls == 0


def test_a_stall_found_by_the_scaling_watch_is_worded_alike(monkeypatch, counted):
    # a closed loop stuck behind a request that never fits, then 12 000 ticks that change
    # nothing: the cluster's stall watch (10 000 such ticks) reads the C loop's state (its
    # probe) and names the stuck request as the Python loop does
    rank = {"backend": "vllm", "block_size": 4, "num_gpu_blocks": 9, "max_num_seqs": 1,
            "max_num_batched_tokens": 200, "timing_model": {"type": "polynomial"},
            "kv_transfer_bandwidth": 400.0, "kv_bytes_per_token": 1024}
    ticks = [{"at_ms": 1.4, "prefill_target": 2, "decode_target": 2},
             {"at_ms": 5.0, "prefill_target": 3, "decode_target": 2},
             {"at_ms": 11.077, "prefill_target": 4, "decode_target": 2},
             {"at_ms": 18.911, "prefill_target": 1, "decode_target": 1},
             {"at_ms": 20.0, "prefill_target": 4}]
    ticks += [{"at_ms": 21.0 + i} for i in range(12_000)]
    payload = {
        "spec": {"version": 1,
                 "topology": {"kind": "disaggregated", "prefill": {"initial_workers": 1},
                              "decode": {"initial_workers": 3}},
                 "engine": {"rank": rank},
                 "adapters": {"placement": {"provider": "round_robin"},
                              "scaling": {"provider": "schedule", "config": {"ticks": ticks}}},
                 "record_per_request": False},
        "traffic": {"source_type": "synthetic", "isl": 15, "osl": 20, "request_count": 35,
                    "arrival_seed": 62, "load_type": "concurrency", "concurrency": 7,
                    "shared_prefix_ratio": 0.1, "num_prefix_groups": 1}}
    probed = []
    check = plain_disagg_native._Scaling.check_drained
    monkeypatch.setattr(plain_disagg_native._Scaling, "check_drained",
                        lambda probe: (probed.append(probe.view.now_ms), check(probe)))
    report, took = both_ways(monkeypatch, counted, payload)
    assert took == 1 and report.startswith("SimulationError: request #") \
        and "can never be scheduled on decode worker" in report
    assert len(probed) == 1 and probed[0] < 21.0 + 12_000 - 1

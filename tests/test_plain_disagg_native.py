"""The plain disaggregated run in one C loop (runtime/plain_disagg_native.py,
csrc/plain_disagg.c) against its twin, runtime/disaggregated.py's Python loop over the same C
role ranks.

Seeded random payloads the C loop takes (1 to 3 prefill and 1 to 3 decode workers, small KV
pools on the decode side so that reservations wait and copies preempt, transfers by bandwidth
in both timing modes or by the fixed handoff latency, max_model_len, preemption modes, prefix
groups, Poisson, constant rate, burst and closed-loop arrivals, synthetic sessions of several
turns, Mooncake traces of one-turn and multi-turn sessions by timestamps or in a closed loop,
fixed and polynomial timing, SLAs, time cutoffs, per-request records kept or not) must give
the same report (wall time aside: its records too) or the same error line both ways; the C
loop must have run.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from aisimulate_core import AisimError, run_replay
from aisimulate_core import native
from aisimulate_core.runtime import plain_disagg_native, plain_native
from report_invariants import comparable
from test_plain_native import _Count, _sessions, _trace

pytestmark = pytest.mark.skipif(native.lib is None or native.resolve_backend() != "c",
                                reason="the C loop runs on the C backend")

CASES = 300


def _payload(rng):
    block = rng.choice([2, 4, 8, 16])
    isl = rng.randint(1, 300)
    osl = rng.choice([1, 2, 3, 5, 8, 20, 60])
    blocks_needed = -(-(isl + osl) // block)
    draw = rng.random()
    if draw < 0.4:            # a decode pool for a few requests at once: reservations wait
        num_blocks = blocks_needed * rng.choice([1, 1, 2, 3])
    elif draw < 0.9:
        num_blocks = blocks_needed * rng.choice([5, 10, 40])
    else:                     # too little for some: failed handoffs, rejections
        num_blocks = rng.randint(max(1, blocks_needed // 2), blocks_needed)
    rank = {
        "backend": rng.choice(["vllm", "vllm", "trtllm"]),
        "block_size": block,
        "num_gpu_blocks": num_blocks,
        "max_num_seqs": rng.choice([1, 2, 3, 8, 64, 256]),
        "max_num_batched_tokens": rng.choice([8, 32, 64, 200, 512, 8192]),
        "enable_prefix_caching": rng.random() < 0.8,
        "enable_chunked_prefill": rng.random() < 0.9,
        "preemption_mode": rng.choice(["lifo", "fifo"]),
        "timing_model": (
            {"type": "polynomial"} if rng.random() < 0.4 else
            {"type": "fixed", "prefill_ms": rng.choice([0.5, 3.0, 10.0, 25.5]),
             "decode_ms": rng.choice([0.25, 1.0, 5.0, 7.3])}),
    }
    if rng.random() < 0.7:
        rank.update(kv_transfer_bandwidth=rng.choice([0.5, 16.0, 64.0, 400.0]),
                    kv_bytes_per_token=rng.choice([1024, 131072]),
                    kv_transfer_timing_mode=rng.choice(["full_prompt",
                                                        "destination_missing"]))
    if rng.random() < 0.2:
        rank["max_model_len"] = rng.randint(max(2, isl - 3), isl + osl + 5)
    traffic = {
        "source_type": "synthetic",
        "isl": isl,
        "osl": osl,
        "request_count": rng.randint(1, 80),
        "arrival_seed": rng.randint(0, 1000),
        "load_type": rng.choice(["poisson", "poisson", "constant_rate", "concurrency"]),
    }
    if traffic["load_type"] == "concurrency":
        traffic["concurrency"] = rng.randint(1, 12)
    else:
        traffic["request_rate"] = rng.choice([5.0, 40.0, 200.0, 1000.0, 50000.0])
    if rng.random() < 0.5:
        traffic["shared_prefix_ratio"] = rng.choice([0.1, 0.5, 0.9, 1.0])
        traffic["num_prefix_groups"] = rng.randint(1, 5)
    topology = {"kind": "disaggregated",
                "prefill": {"initial_workers": rng.randint(1, 3)},
                "decode": {"initial_workers": rng.randint(1, 3)}}
    if rng.random() < 0.5:
        topology["handoff_latency_ms"] = rng.choice([0.0, 0.7, 4.0])
    spec = {
        "version": 1,
        "topology": topology,
        "engine": {"rank": rank},
        "adapters": {"placement": {"provider": "round_robin"}, "scaling": {"provider": "none"}},
        "record_per_request": rng.random() < 0.5,
    }
    if rng.random() < 0.4:
        keys = ("e2e_ms",) if rng.random() < 0.3 else \
            [key for key in ("ttft_ms", "itl_ms") if rng.random() < 0.7]
        spec["sla"] = {key: rng.choice([5.0, 30.0, 100.0, 400.0, 50]) for key in keys}
    if rng.random() < 0.2:
        spec["max_sim_time_ms"] = rng.choice([1.0, 50.0, 300.0, 2000.0])
    return {"spec": spec, "traffic": traffic}


def _report(payload, on_record=None):
    try:
        report = run_replay(json.loads(json.dumps(payload)), on_record=on_record)
    except AisimError as error:
        return f"{type(error).__name__}: {error}"
    return comparable(json.loads(report.to_json()))


@pytest.fixture
def counted(monkeypatch):
    counter = _Count(plain_disagg_native.run)
    monkeypatch.setattr(plain_disagg_native, "run", counter)
    return counter


def _random_payload(rng, tmp_path, case):
    payload = _payload(rng)
    draw = rng.random()
    if draw < 0.25:
        return _sessions(rng, payload)
    if draw < 0.6:
        return _trace(rng, payload, tmp_path / f"trace_{case}.jsonl")
    return payload


def both_ways(monkeypatch, counted, payload, streamed=False):
    """The report (or error line) with the C loop allowed and whether it ran; the Python
    loop's must be the same, and with ``streamed`` the records its on_record heard (in
    order, and what each said when it came)."""
    before = counted.calls
    out = []
    for enabled in (True, False):
        monkeypatch.setattr(plain_native, "ENABLED", enabled)
        records = []
        report = _report(payload, on_record=(lambda r: records.append(json.dumps(r)))
                         if streamed else None)
        out.append((report, records))
        if enabled:
            took = counted.calls - before
    assert counted.calls == before + took
    assert out[0] == out[1], payload
    return out[0][0], took


def test_random_runs_match_the_python_loop(monkeypatch, counted, tmp_path):
    # records off, kept, or streamed to on_record
    rng = random.Random(20261202)
    ran = 0
    for case in range(CASES):
        payload = _random_payload(rng, tmp_path, case)
        ran += both_ways(monkeypatch, counted, payload, streamed=rng.random() < 0.3)[1]
    # (a payload the validation refuses never reaches a loop)
    assert ran > CASES * 0.9


def _kv_router(rng):
    """A kv_router config the C loop takes (no pending queue, no KV event lag, no sampling):
    each pool's router with the reference's overrides."""
    config = {}
    for key, values in (("overlap_score_credit", [0.0, 0.5, 1.0, 2.0]),
                        ("prefill_load_scale", [0.0, 0.5, 1.0, 3.0]),
                        ("overlap_score_credit_decay", [0.0, 0.1, 1.0]),
                        ("decode_active_request_weight", [0.0, 0.5, 2.0]),
                        ("router_track_active_blocks", [True, False]),
                        ("router_assume_kv_reuse", [True, False]),
                        ("router_track_prefill_tokens", [True, False])):
        if rng.random() < 0.5:
            config[key] = rng.choice(values)
    return {"provider": "kv_router", "config": config}


def test_random_kv_router_runs_match_the_python_loop(monkeypatch, counted, tmp_path):
    # the C kv_router of each pool (kv_router.c) placing inside the C loop: prompts of id
    # ranges and trace runs, engine-index overlaps, prefill completions and terminals
    rng = random.Random(20261205)
    ran = 0
    cases = 150
    for case in range(cases):
        payload = _random_payload(rng, tmp_path, case)
        payload["spec"]["adapters"]["placement"] = _kv_router(rng)
        ran += both_ways(monkeypatch, counted, payload, streamed=rng.random() < 0.25)[1]
    assert ran > cases * 0.9


# the shared bench payloads, beside the project (found from here: make asan runs elsewhere)
_BENCH = Path(__file__).resolve().parent.parent.parent / "shared" / "bench"


def _b5(**spec):
    with open(_BENCH / "b5_disagg_1p2d.json", encoding="utf-8") as handle:
        payload = json.load(handle)
    payload["traffic"]["request_count"] = 50
    payload["spec"].update(spec)
    return payload


def _eligible(payload):
    from aisimulate_core.runtime.build import build_simulation
    from aisimulate_core.spec import load_payload
    sim = build_simulation(load_payload(json.dumps(payload)))
    return plain_disagg_native.eligible(sim, sim.max_sim_time_ms)


def test_the_c_loop_takes_b5_and_declines_others(monkeypatch):
    assert _eligible(_b5()) is None
    assert _eligible(_b5(record_per_request=True)) is None
    payload = _b5()
    payload["spec"]["adapters"]["placement"] = {"provider": "kv_router"}
    assert _eligible(payload) is None
    for config in ({"kv_event_lag_ms": 2.0}, {"router_queue_threshold": 1.0},
                   {"router_temperature": 0.5}):
        # (KV events to send, signals in running order, the Python router sampling: ranks
        # watched as the loop cannot)
        payload["spec"]["adapters"]["placement"]["config"] = config
        assert _eligible(payload) == "a rank the loop cannot drive"
    payload = _b5()
    payload["spec"]["engine"]["dp_size"] = 2
    assert _eligible(payload) == "a worker of another kind"
    payload = _b5()
    payload["spec"]["engine"]["rank"]["backend"] = "sglang"
    assert _eligible(payload) == "a subclass of the disaggregated loop"
    payload = _b5()
    payload["traffic"] = {"source_type": "trace", "trace_format": "mooncake",
                          "trace_block_size": 512,
                          "trace_path": str(_BENCH.parent / "data/mooncake/conversation_trace.jsonl")}
    assert _eligible(payload) is None
    monkeypatch.setattr(plain_native, "ENABLED", False)
    assert _eligible(_b5()) == "switched off"


def test_b5_runs_in_c_with_the_python_loops_summary(monkeypatch, counted):
    payload = _b5()
    payload["traffic"]["request_count"] = 400
    fast = _report(payload)
    assert counted.calls == 1
    monkeypatch.setattr(plain_native, "ENABLED", False)
    assert isinstance(fast, dict) and fast == _report(payload)
    assert fast["completed_requests"] == 400


def test_streamed_records_are_the_python_loops(monkeypatch, counted):
    # a stream hands a record over once a later arrival settled: a source released after
    # that is not on it (the prefill worker's 25 ms passes release sources long after their
    # requests' two tokens), on a kept record it is
    payload = _b5(record_per_request=True)
    payload["traffic"].update(request_count=60, osl=2, request_rate=200.0, isl=64)
    payload["spec"]["engine"]["rank"]["timing_model"] = {"type": "fixed", "prefill_ms": 25.0,
                                                         "decode_ms": 0.25}
    report, took = both_ways(monkeypatch, counted, payload, streamed=True)
    assert took == 1 and "per_request" not in report
    monkeypatch.setattr(plain_native, "ENABLED", True)
    streamed = []
    run_replay(json.loads(json.dumps(payload)), on_record=streamed.append)
    kept = run_replay(json.loads(json.dumps(payload))).per_request
    assert counted.calls == 3 and len(streamed) == len(kept) == 60
    assert sum(r["source_released_ms"] is None for r in streamed) > 20
    assert all(r["source_released_ms"] is not None for r in kept)


def test_records_of_b5_and_its_traces_are_the_python_loops(monkeypatch, counted):
    # the bench's k4 (kv_router) and s2 traces with no scaling, k4 with round robin too, and
    # b5, records kept
    cluster = _BENCH / "cluster"
    payloads = [_b5(record_per_request=True)]
    for name, placement in (("k4_kv_router_disagg_2p1d", None),
                            ("k4_kv_router_disagg_2p1d", "round_robin"),
                            ("s2_schedule_scaling_disagg_rr", "round_robin")):
        payload = json.loads((cluster / f"{name}.json").read_text())
        payload["spec"]["adapters"]["scaling"] = {"provider": "none"}
        if placement is not None:
            payload["spec"]["adapters"]["placement"] = {"provider": placement}
        payload["traffic"]["trace_path"] = str(cluster / "data" / Path(
            payload["traffic"]["trace_path"]).name)
        payloads.append(payload)
    for payload in payloads:
        report, took = both_ways(monkeypatch, counted, payload)
        assert took == 1 and len(report["per_request"]) == report["completed_requests"] > 0

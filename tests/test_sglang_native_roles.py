"""The disaggregated roles of the C SGLang rank (engine/sglang_native_roles.py over
csrc/sglang_roles.c) against their twins, SglangPrefillRank and SglangDecodeRank
(engine/sglang_roles.py), in the destination-first handoff of runtime/sglang_handoff.py.

Seeded random SGLang P/D deployments (tests/test_sglang_pd_extension.py's: tight decode pools,
few slots, slow links in both timing modes, one or two workers per pool), varied further:
requests with nothing to generate, authored outputs, a prefill ``max_model_len`` that rejects
copies whose destinations are reserved (cancelled then), a decode one that refuses
destinations, chunked prefill copies, closed-loop synthetic traffic (prompts from id ranges,
runs cut by unforeseen arrivals) and time limits. Each runs through the runtime once with the C
roles and once with the Python ones; both must give the same events in the same order, report
and records, visited times, and on every rank the same pass history, ITL, radix tree and pool
counts, with the runtime's invariant checker (runtime/checks.py) quiet at every visited time.
"""

from __future__ import annotations

import json
import random
from collections import deque
from pathlib import Path

import pytest

from aisimulate_core import build_simulation, load_payload, native
from aisimulate_core.errors import NativeArgumentError
from test_sglang_extension import WALL_CLOCK_KEYS
from test_sglang_pd_extension import _payload as pd_payload

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(native.lib is None or native.BACKEND != "c",
                                reason="the C roles run on the C backend only")

if native.lib is not None:
    from aisimulate_core.engine.sglang_native_roles import (SGLANG_RANK_CLASSES,
                                                           NativeSglangDecodeRank,
                                                           NativeSglangPrefillRank)
    C_ROLES = (NativeSglangPrefillRank, NativeSglangDecodeRank)


def _payload(seed):
    """A test_sglang_pd_extension deployment, varied by the seed."""
    payload = pd_payload(seed)
    rng = random.Random(seed * 7919 + 3)
    engine = payload["engine"]
    prefill, decode = engine["prefill"]["rank"], engine["decode"]["rank"]
    requests = payload["requests"]
    if rng.random() < 0.15:
        for req in requests[::3]:     # nothing to generate: done at promotion, no token
            req["output_tokens"] = 0
    if rng.random() < 0.3:
        for req in requests:     # authored outputs: the trees hold their tokens
            req["output_token_ids"] = [rng.randrange(1, 50) for _ in range(req["output_tokens"])]
    if rng.random() < 0.15:
        prefill["max_model_len"] = rng.choice((40, 90))     # rejected after the reservation
    if rng.random() < 0.1:
        decode["max_model_len"] = rng.choice((60, 110))     # refused at once
    if rng.random() < 0.2:
        prefill.setdefault("sglang", {})["chunked_prefill_size"] = rng.choice((16, 48))
    if rng.random() < 0.15:
        payload["max_sim_time_ms"] = rng.choice((150.0, 600.0))
    if rng.random() < 0.2:
        # a closed loop: turns arrive when earlier ones finish, unforeseen by the decode
        # workers' runs; synthetic prompts are id ranges (the C ranks' ranged accept)
        del payload["requests"]
        traffic = {"source_type": "synthetic-session", "load_type": "concurrency",
                   "concurrency": rng.choice((2, 5, 12)), "isl": rng.choice((16, 60)),
                   "osl": rng.choice((5, 40)), "request_count": 30, "turns_per_session": 3,
                   "inter_turn_delay_ms": rng.choice((0.0, 7.0)),
                   "shared_prefix_ratio": rng.choice((0.0, 0.5)), "num_prefix_groups": 3}
        return {"spec": payload, "traffic": traffic}
    return payload


def _outcome(payload):
    """Everything a run shows, in the order it happened; and how many C role ranks ran."""
    events = []

    def on_event(kind, t, request):
        events.append((kind, t, request.uuid))

    sim = build_simulation(load_payload(json.dumps(payload)), on_event=on_event)
    ranks = [rank for worker in sim.workers for rank in worker.ranks]
    natives = sum(isinstance(rank, C_ROLES) for rank in ranks)
    try:
        sim.run()
    except Exception as exc:   # the same error both ways counts as the same outcome
        return ("error", type(exc).__name__, str(exc), events), natives
    report = json.loads(sim.report().to_json())
    for key in WALL_CLOCK_KEYS:
        report.pop(key)
    history = [(list(rank.pass_ends), rank.itl_gaps(), rank.committed_prefill_tokens,
                rank.cache.tree(), rank.cache.free_tokens, rank.cache.evictable_size,
                rank.cache.protected_size, rank.retractions,
                [r.uuid for r in getattr(rank, "pending", ())])
               for rank in ranks]
    return (events, report, list(sim._visited), history), natives


def _python_roles(monkeypatch):
    for role, (_, twin) in SGLANG_RANK_CLASSES.items():
        monkeypatch.setitem(SGLANG_RANK_CLASSES, role, (twin, twin))


@pytest.mark.parametrize("chunk", range(4))
def test_random_deployments_match_the_python_roles(monkeypatch, chunk):
    monkeypatch.setenv("AISIMULATE_CHECK", "1")     # KV conserved at every visited time
    natives = 0
    for seed in range(chunk * 50, chunk * 50 + 50):
        payload = _payload(seed)
        got, used = _outcome(payload)
        with monkeypatch.context() as patch:
            _python_roles(patch)
            expected, twins = _outcome(payload)
        assert twins == 0
        assert got == expected, f"seed {seed}"
        natives += used
    assert natives >= 100            # the C roles ran in (nearly) every deployment


def test_the_bench_deployment_matches_the_python_roles(monkeypatch):
    """bench/feature_sglang_pd_1p2d.json, cut to its first 600 requests."""
    with open(ROOT / "bench" / "feature_sglang_pd_1p2d.json", encoding="utf-8") as f:
        payload = json.load(f)
    payload["traffic"]["request_count"] = 600
    got, used = _outcome(payload)
    _python_roles(monkeypatch)
    expected, _ = _outcome(payload)
    assert used == 3 and got == expected


def test_a_watched_role_becomes_its_python_twin(monkeypatch):
    """Watched before it takes a request (a router's KV events, telemetry), a C role is its
    Python twin then."""
    from aisimulate_core.engine.sglang_roles import SglangDecodeRank, SglangPrefillRank

    sim = build_simulation(load_payload(json.dumps(_payload(1))))
    prefill, decode = sim.prefill_workers[0].ranks[0], sim.decode_workers[0].ranks[0]
    assert (type(prefill), type(decode)) == C_ROLES
    prefill.watched = decode.watched = True
    assert (type(prefill), type(decode)) == (SglangPrefillRank, SglangDecodeRank)
    assert decode.pending == deque() and decode.holds == 0 and prefill.held_sources == 0


def test_role_calls_on_the_wrong_slot_are_errors():
    """The C role calls check their slot: a clear error, and the rank keeps working."""
    sim = build_simulation(load_payload(json.dumps(_payload(2))))
    prefill, decode = sim.prefill_workers[0].ranks[0], sim.decode_workers[0].ranks[0]
    lib = native.lib
    with pytest.raises(NativeArgumentError, match="aisim_sglang_activate"):
        native.check_status(lib.aisim_sglang_activate(decode._rank, 0), "aisim_sglang_activate")
    for call in (lib.aisim_sglang_cancel, lib.aisim_sglang_release_source):
        assert call(decode._rank, 0) == native.EINVAL
        assert call(prefill._rank, -1) == native.EINVAL
    assert lib.aisim_sglang_release_source(decode._rank, 0) == native.EINVAL   # wrong role
    out = native.ffi.new("int32_t *"), native.ffi.new("int64_t *"), native.ffi.new("int64_t *")
    assert lib.aisim_sglang_retry(prefill._rank, 0, *out) == native.EINVAL
    sim.run()
    assert sim.report().summary["completed_requests"] > 0

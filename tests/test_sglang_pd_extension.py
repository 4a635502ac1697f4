"""The SGLang decode role's decode-only runs in the disaggregated loop (``SglangDecodeRank.extend``
with the destination-first handoff of runtime/sglang_handoff.py): one event for the decode
passes after a pass, exactly as if each were its own event.

The differential test runs seeded random SGLang P/D deployments twice, with the decode role's
extension on and switched off (``SglangRank.extension``), and asserts the same events,
per-request records and summary, and the same pass history and radix tree on every rank
(tests/test_sglang_extension.py's ``_outcome``). The deployments keep destinations pending
(tight decode pools, few slots), transfers in flight across runs (slow links, both timing
modes), retracted requests behind waiting destinations and prebuilt requests waiting for a
slot; the test also checks that runs were extended and cut short.
"""

from __future__ import annotations

import gc
import json
import random
from array import array

import pytest

from aisimulate_core import Prompt, SimRequest, build_simulation, load_payload, native
from aisimulate_core.engine.sglang import SglangRank
from aisimulate_core.engine.sglang_native_roles import SGLANG_RANK_CLASSES
from aisimulate_core.engine.sglang_roles import SglangDecodeRank, _share_tokens
from aisimulate_core.engine.sglang_tokens import ensure_tokens
from aisimulate_core.runtime.disaggregated import DisaggregatedSimulation
from aisimulate_core.runtime.sglang_handoff import SglangDisaggregatedSimulation
from test_sglang_extension import WALL_CLOCK_KEYS, _outcome

SEEDS = range(60)


def _rank(rng, blocks, page):
    rank = {"backend": "sglang", "block_size": page, "num_gpu_blocks": blocks,
            "max_num_seqs": rng.choice((2, 4, 64, 64)),
            "enable_prefix_caching": rng.random() < 0.8,
            "timing_model": rng.choice((
                {"type": "polynomial"},
                {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 5.0},
                {"type": "fixed", "prefill_ms": 3.0, "decode_ms": 0.7})),
            "sglang": {"schedule_policy": rng.choice(("fifo", "fifo", "lpm")),
                       "clip_max_new_tokens": rng.choice((3, 20, 4096))}}
    if rng.random() < 0.2:
        rank["prefill_decode_interval"] = rng.choice((1, 3))
    return rank


def _payload(seed):
    rng = random.Random(seed)
    page = rng.choice((1, 4, 16))
    groups = [[rng.randrange(1, 900) for _ in range(120)] for _ in range(3)]
    requests = []
    t = 0.0
    longest = 0
    for i in range(rng.randint(10, 40)):
        t += rng.choice((0.0, 1.0, 4.0, 13.0, 60.0))
        isl = rng.randint(4, 120)
        tokens = list(rng.choice(groups)[:isl]) if rng.random() < 0.7 else []
        while len(tokens) < isl:
            tokens.append(rng.randrange(1000, 60000))
        out = rng.choice((1, 2, 9, 30, 90, 200))
        longest = max(longest, isl + out)
        requests.append({"id": f"r{i}", "arrival_time_ms": t, "input_tokens": isl,
                         "input_token_ids": tokens, "output_tokens": out})
    pages = -(-longest // page) + 2
    decode = _rank(rng, pages * rng.choice((1, 2, 4, 30)), page)
    prefill = _rank(rng, 16384 // page, page)
    if rng.random() < 0.8:
        link = {"kv_transfer_bandwidth": rng.choice((0.05, 0.5, 4.0)),
                "kv_transfer_bytes_per_token": 100000,
                "kv_transfer_timing_mode": rng.choice(("full_prompt", "destination_missing"))}
        prefill.update(link)
        decode.update(link)
    return {"version": 1,
            "topology": {"kind": "disaggregated",
                         "prefill": {"initial_workers": rng.choice((1, 2))},
                         "decode": {"initial_workers": rng.choice((1, 1, 2))}},
            "engine": {"dp_size": 1, "tensor_parallel_size": 1, "rank": decode,
                       "prefill": {"dp_size": 1, "tensor_parallel_size": 1, "rank": prefill},
                       "decode": {"dp_size": 1, "tensor_parallel_size": 1, "rank": decode}},
            "adapters": {"placement": {"provider": "round_robin"},
                         "scaling": {"provider": "none"}},
            "record_per_request": True, "requests": requests}


def python_roles(monkeypatch):
    """The runtime builds the Python roles (their runs are the ones counted and switched)."""
    for role, (_, twin) in SGLANG_RANK_CLASSES.items():
        monkeypatch.setitem(SGLANG_RANK_CLASSES, role, (twin, twin))


def test_decode_role_runs_match_single_passes(monkeypatch):
    monkeypatch.setenv("AISIMULATE_CHECK", "1")     # KV conserved at every visited time
    python_roles(monkeypatch)
    counts = {"extra": 0, "cut": 0}
    extend, truncate = SglangDecodeRank.extend, SglangRank.truncate

    def counting_extend(rank, *args, **kwargs):
        end = extend(rank, *args, **kwargs)
        if rank._macro_ends is not None:
            counts["extra"] += len(rank._macro_ends) - 1
        return end

    def counting_truncate(rank, arrival_ms, started=False):
        before = rank.pass_end_ms
        end = truncate(rank, arrival_ms, started)
        if isinstance(rank, SglangDecodeRank):
            counts["cut"] += end < before
        return end

    monkeypatch.setattr(SglangDecodeRank, "extend", counting_extend)
    monkeypatch.setattr(SglangRank, "truncate", counting_truncate)
    for seed in SEEDS:
        payload = _payload(seed)
        extended = _outcome(payload)
        monkeypatch.setattr(SglangDecodeRank, "extension", False)
        single = _outcome(payload)
        monkeypatch.delattr(SglangDecodeRank, "extension")
        assert extended == single, f"seed {seed}"
    # the decode roles' runs were extended, and some were cut short (an accept, a transfer)
    assert counts["extra"] > 20_000
    assert counts["cut"] > 200


def test_a_role_copy_shares_the_prompt_tokens_ensure_tokens_builds():
    # the strided build of a prompt of whole runs (a trace's hash ids) and a cut last run
    # gives what ensure_tokens builds; the decode copy's array serves its prefill copy too
    rng = random.Random(7)
    for _ in range(200):
        block = rng.choice((1, 2, 16, 64))
        ids = [rng.randrange(1, 1 << 31) for _ in range(rng.randint(1, 80))]
        length = rng.randint(max(1, (len(ids) - 1) * block + 1), len(ids) * block)
        copies = [SimRequest(1, Prompt.from_hash_ids(array("I", ids), length, block), 5,
                             0.0) for _ in range(2)]
        expected = ensure_tokens(SimRequest(1, Prompt.from_hash_ids(array("I", ids), length,
                                                                    block), 5, 0.0), length)
        _share_tokens(copies[0], None)
        _share_tokens(copies[1], copies[0])
        assert copies[0].hash_cache == expected
        assert copies[1].hash_cache is copies[0].hash_cache


def test_finished_requests_are_freed_without_the_cyclic_collector():
    # a request, its handoff and its role copies link each other; once the request is
    # terminal, its driver told and its source released, the handoff unlinks them
    # (SglangDisaggregatedSimulation._tell_driver), so none of them is cyclic garbage
    payload = _payload(3)
    gc.collect()
    gc.disable()
    try:
        sim = build_simulation(load_payload(json.dumps(payload)))
        sim.run()
        report = sim.report()
        requests = sum(isinstance(o, SimRequest) for o in gc.get_objects())
        gc.collect()
        left = sum(isinstance(o, SimRequest) for o in gc.get_objects())
    finally:
        gc.enable()
    assert report.summary["completed_requests"] == len(payload["requests"])
    assert requests == left


def _quiet_outcome(payload):
    """``_outcome`` without an event callback (which keeps every run cut at its visited times)."""
    sim = build_simulation(load_payload(json.dumps(payload)))
    try:
        sim.run()
    except Exception as exc:
        return ("error", type(exc).__name__, str(exc))
    report = json.loads(sim.report().to_json())
    for key in WALL_CLOCK_KEYS:
        report.pop(key)
    history = [(list(rank.pass_ends), rank.itl_gaps(), rank.committed_prefill_tokens,
                rank.cache.free_tokens, rank.cache.evictable_size)
               for worker in sim.workers for rank in worker.ranks]
    return report, history


@pytest.mark.skipif(native.lib is None or native.BACKEND != "c",
                    reason="runs are left uncut only on the C decode roles")
def test_runs_left_uncut_at_quiet_pass_ends_match_cut_runs(monkeypatch):
    """A C decode role's run with a pass end at a visited time is left uncut when only the rank
    sees that pass end (``_quiet_pass_end``), and cut and completed there only when something
    reaches the worker then (``_reach``: before the step's decode workers start, or after,
    when it starts again too): the same records, summary and pass history as when every such
    run is cut at once."""
    monkeypatch.setenv("AISIMULATE_CHECK", "1")
    counts = {"uncut": 0, "reached early": 0, "reached started": 0}
    quiet, reach = SglangDisaggregatedSimulation._quiet_pass_end, DisaggregatedSimulation._reach

    def counting_quiet(sim, rank):
        answer = quiet(sim, rank)
        counts["uncut"] += answer
        return answer

    def counting_reach(sim, key):
        counts["reached started" if sim._uncut_started else "reached early"] += 1
        reach(sim, key)

    monkeypatch.setattr(DisaggregatedSimulation, "_reach", counting_reach)
    for seed in range(200):   # (more seeds than SEEDS: a reach needs a coincidence)
        payload = _payload(seed)
        monkeypatch.setattr(SglangDisaggregatedSimulation, "_quiet_pass_end", counting_quiet)
        uncut = _quiet_outcome(payload)
        monkeypatch.setattr(SglangDisaggregatedSimulation, "_quiet_pass_end",
                            lambda sim, rank: False)
        assert uncut == _quiet_outcome(payload), f"seed {seed}"
    assert counts["uncut"] > 200
    assert counts["reached early"] > 30 and counts["reached started"] > 8

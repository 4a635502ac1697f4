"""SGLang's decode-only runs (``SglangRank.extend``): one event for the decode passes after a
pass, exactly as if each were its own event.

The differential test runs seeded random SGLang workloads twice, with the extension on and
switched off (``SglangRank.extension``), and asserts the same events, per-request records and
summary, and the same pass history and radix tree (spans, access stamps, locks) on every rank
(events that share a time are compared as a set: see ``_outcome``). The workloads are small and
tight (a few hundred KV tokens, pages of 1 to 16 tokens, short clips, deferred prefill rounds,
LPM, closed loops over several workers) so that retraction, eviction, refused heads and
truncated runs are common; the test also checks that runs were extended and truncated.
"""

from __future__ import annotations

import json
import random

import pytest

from aisimulate_core import build_simulation
from aisimulate_core.engine import sglang_native
from aisimulate_core.engine.sglang import SglangRank
from aisimulate_core.spec import load_payload

SEEDS = range(120)
# what the host's clock measures, not the simulation
WALL_CLOCK_KEYS = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")


def _rank(rng):
    page = rng.choice((1, 1, 2, 4, 16))
    rank = {
        "backend": "sglang",
        "block_size": page,
        "num_gpu_blocks": rng.choice((150, 200, 400, 1000, 4000)) // page + 1,
        "max_num_seqs": rng.choice((1, 3, 8, 64)),
        "enable_prefix_caching": rng.random() < 0.8,
        "timing_model": rng.choice((
            {"type": "polynomial"},
            {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 5.0},
            {"type": "fixed", "prefill_ms": 3.0, "decode_ms": 0.7},
        )),
        "sglang": {
            "schedule_policy": rng.choice(("fifo", "fifo", "lpm")),
            "max_prefill_tokens": rng.choice((128, 16384)),
            "chunked_prefill_size": rng.choice((32, 96, 8192)),
            "clip_max_new_tokens": rng.choice((3, 20, 4096)),
            "schedule_conservativeness": rng.choice((0.3, 1.0, 1.7)),
        },
    }
    if rng.random() < 0.3:
        rank["prefill_decode_interval"] = rng.choice((1, 3))
    if rng.random() < 0.2:
        rank["max_model_len"] = rng.choice((40, 150))
    return rank


def _prompt(rng, groups):
    """Token ids: a shared group prefix (or none), then ids of the request's own."""
    isl = rng.randint(4, 120)
    tokens = []
    if groups and rng.random() < 0.7:
        tokens = list(rng.choice(groups)[:isl])
    while len(tokens) < isl:
        tokens.append(rng.randrange(1000, 60000))
    return tokens


def _payload(seed):
    rng = random.Random(seed)
    spec = {
        "version": 1,
        "topology": {"kind": "aggregated",
                     "workers": {"initial_workers": rng.choice((1, 1, 2, 3))}},
        "engine": {"rank": _rank(rng)},
        "record_per_request": True,
    }
    if rng.random() < 0.2:
        spec["max_sim_time_ms"] = rng.choice((150.0, 600.0))
    if rng.random() < 0.35:
        # a closed loop: a turn arrives when an earlier one finishes, unforeseen by the
        # workers already running (their runs are truncated)
        traffic = {"source_type": "synthetic-session", "load_type": "concurrency",
                   "concurrency": rng.choice((2, 5, 12)), "isl": rng.choice((16, 60)),
                   "osl": rng.choice((5, 40)), "request_count": 30, "turns_per_session": 3,
                   "inter_turn_delay_ms": rng.choice((0.0, 7.0)),
                   "shared_prefix_ratio": rng.choice((0.0, 0.5)),
                   "num_prefix_groups": 3}
        return {"spec": spec, "traffic": traffic}
    groups = [[rng.randrange(1, 900) for _ in range(120)] for _ in range(3)]
    requests = []
    t = 0.0
    for i in range(rng.randint(5, 40)):
        t += rng.choice((0.0, 0.0, 1.0, 13.0, 60.0, 250.0))
        tokens = _prompt(rng, groups)
        requests.append({"id": f"r{i}", "arrival_time_ms": t, "input_tokens": len(tokens),
                         "input_token_ids": tokens,
                         "output_tokens": rng.choice((0, 1, 2, 9, 30, 90))})
    spec["requests"] = requests
    return spec


class Spy:
    """Counts what the real ``extend``/``truncate`` did (they run unchanged)."""

    def __init__(self, monkeypatch):
        self.extra = self.truncated = 0
        # the Python rank's runs are counted: the runtime builds it, not the C one
        monkeypatch.setattr(sglang_native, "rank_class", lambda engine, **_: SglangRank)
        extend, truncate = SglangRank.extend, SglangRank.truncate
        spy = self

        def counting_extend(rank, *args, **kwargs):
            end = extend(rank, *args, **kwargs)
            if rank._macro_ends is not None:
                spy.extra += len(rank._macro_ends) - 1
            return end

        def counting_truncate(rank, arrival_ms):
            before = rank.pass_end_ms
            end = truncate(rank, arrival_ms)
            spy.truncated += end < before
            return end

        monkeypatch.setattr(SglangRank, "extend", counting_extend)
        monkeypatch.setattr(SglangRank, "truncate", counting_truncate)


def _tree(node):
    """The radix tree below ``node``: spans, access stamps (LRU order), locks, children."""
    return (node.start, node.end, node.access, node.lock,
            sorted((key, _tree(child)) for key, child in node.children.items()))


def _outcome(payload):
    """Everything a run shows: its events, report (wall time aside) and pass history."""
    events = []

    def on_event(kind, t, request):
        events.append((kind, t, request.uuid))

    sim = build_simulation(load_payload(json.dumps(payload)), on_event=on_event)
    try:
        sim.run()
    except Exception as exc:   # the same error both ways counts as the same outcome
        return ("error", type(exc).__name__, str(exc), sorted(events))
    report = json.loads(sim.report().to_json())
    for key in WALL_CLOCK_KEYS:
        report.pop(key)
    history = [(list(rank.pass_ends), rank.itl_gaps(), rank.committed_prefill_tokens,
                _tree(rank.cache.root), rank.cache.free_tokens, rank.cache.evictable_size)
               for worker in sim.workers for rank in worker.ranks]
    # Passes of different workers that end at one time complete in the order the runtime
    # queued their events, and an extended pass is queued when it starts (vLLM's too): only
    # the order of such events may differ, so events are compared sorted within a time.
    return sorted(events), report, history


def test_extended_runs_match_single_passes(monkeypatch):
    monkeypatch.setenv("AISIMULATE_CHECK", "1")     # KV conserved at every visited time
    spy = Spy(monkeypatch)
    for seed in SEEDS:
        payload = _payload(seed)
        extended = _outcome(payload)
        monkeypatch.setattr(SglangRank, "extension", False)
        single = _outcome(payload)
        monkeypatch.setattr(SglangRank, "extension", True)
        assert extended == single, f"seed {seed}"
    # the runs were extended, and some were cut short by an arrival
    assert spy.extra > 10_000
    assert spy.truncated > 10


def _decoders_payload(output_tokens, arrival_ms):
    """Two decoders; a third request arrives at ``arrival_ms``."""
    rows = [("a", 0.0, output_tokens), ("b", 0.0, output_tokens), ("c", arrival_ms, 3)]
    requests = [{"id": rid, "arrival_time_ms": t, "input_tokens": 8,
                 "input_token_ids": [i * 100 + k for k in range(8)], "output_tokens": out}
                for i, (rid, t, out) in enumerate(rows)]
    return {"version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
            "engine": {"rank": {"backend": "sglang", "num_gpu_blocks": 4096,
                                "timing_model": {"type": "fixed", "prefill_ms": 10.0,
                                                 "decode_ms": 5.0}}},
            "record_per_request": True, "requests": requests}


def test_a_run_reaches_the_next_known_arrival():
    # a and b prefill in 0-10, then decode every 5 ms; c arrives at 52: the prefill pass is
    # extended by the decode passes that start before 52 (the last one 50-55), then c prefills
    sim = build_simulation(load_payload(json.dumps(_decoders_payload(20, 52.0))))
    rank = sim.workers[0].ranks[0]
    sim.run_until(0.0)
    assert list(rank._macro_ends) == [10.0 + 5 * i for i in range(10)]   # 10, 15 .. 55
    assert rank.ends_pass_at(30.0) and not rank.ends_pass_at(31.0)
    assert not rank.ends_pass_at(55.0)            # the last pass's end is the event itself
    sim.run()
    records = json.loads(sim.report().to_json())["per_request"]
    c = next(r for r in records if r["requested_output_length"] == 3)
    assert (c["first_admit_ms"], c["first_token_ms"], c["last_token_ms"]) == (55.0, 65.0, 75.0)
    # tokens 2..10 of a and b in 15..55, none in c's prefill, tokens 11..20 in 70..115
    assert [r["last_token_ms"] for r in records if r is not c] == [115.0, 115.0]


def test_a_run_ends_with_the_pass_of_a_last_token_and_truncates_at_an_arrival():
    sim = build_simulation(load_payload(json.dumps(_decoders_payload(20, 1e9))))
    rank = sim.workers[0].ranks[0]
    sim.run_until(0.0)
    assert list(rank._macro_ends) == [10.0 + 5 * i for i in range(20)]   # 10 .. 105
    assert rank._ends_finishing                   # a and b emit their 20th token in it
    assert rank.truncate(31.0) == 35.0            # in flight at 31: the pass 30-35
    assert not rank._ends_finishing
    assert rank.truncate(30.0) == 30.0            # an arrival at a pass end joins the next
    assert rank.truncate(5.0) == 10.0 and rank._macro_ends is None

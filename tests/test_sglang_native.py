"""The C SGLang rank (engine/sglang_native.py over csrc/sglang_rank.c) against its Python twin
(engine/sglang.py's SglangRank): seeded random workloads run once with each rank give the same
events, records and report, and on every rank the same pass history (``pass_ends``,
``itl_gaps()``, committed prefill tokens) and radix tree (edges, spans, access stamps, locks,
free and evictable tokens).

The workloads are tests/test_sglang_extension.py's (tight pools, pages of 1 to 16 tokens,
short clips, deferred prefill rounds, LPM, ``max_model_len``, closed loops, time limits), and
more: authored output tokens, and larger pools where decode-only runs are long.
"""

from __future__ import annotations

import json
import random

import pytest

from aisimulate_core import build_simulation, native
from aisimulate_core.engine import ENGINES
from aisimulate_core.engine.sglang import SglangRank
from aisimulate_core.spec import load_payload

from test_sglang_extension import WALL_CLOCK_KEYS, _payload as extension_payload
from test_sglang_pd_extension import _payload as pd_payload

pytestmark = pytest.mark.skipif(native.lib is None, reason="the C core is not built")

if native.lib is not None:
    from aisimulate_core.engine import sglang_native
    from aisimulate_core.engine.sglang_native import NativeSglangRank, rank_class, supports


def _payload(seed):
    """A test_sglang_extension workload, varied by the seed."""
    payload = extension_payload(seed)
    spec = payload.get("spec", payload)
    rank = spec["engine"]["rank"]
    rng = random.Random(seed * 7919 + 1)
    if rng.random() < 0.3 and "requests" in spec:
        for req in spec["requests"]:     # authored outputs: the tree holds their tokens
            req["output_token_ids"] = [rng.randrange(1, 50) for _ in range(req["output_tokens"])]
    if rng.random() < 0.2:
        rank["num_gpu_blocks"] = 20000 // rank["block_size"] + 1
    return payload


def _outcome(payload, rank_cls, monkeypatch):
    # the runtime builds an SGLang rank of sglang_native.rank_class (ENGINES before it did)
    monkeypatch.setitem(ENGINES, "sglang", rank_cls)
    monkeypatch.setattr(sglang_native, "rank_class", lambda engine, **_: rank_cls)
    events = []

    def on_event(kind, t, request):
        events.append((kind, t, request.uuid))

    sim = build_simulation(load_payload(json.dumps(payload)), on_event=on_event)
    try:
        sim.run()
    except Exception as exc:   # the same error both ways counts as the same outcome
        return ("error", type(exc).__name__, str(exc), events), 0
    report = json.loads(sim.report().to_json())
    for key in WALL_CLOCK_KEYS:
        report.pop(key)
    ranks = [rank for worker in sim.workers for rank in worker.ranks]
    history = [(list(rank.pass_ends), rank.itl_gaps(), rank.committed_prefill_tokens,
                rank.cache.tree(), rank.cache.free_tokens, rank.cache.evictable_size,
                rank.cache.protected_size, rank.retractions)
               for rank in ranks]
    natives = sum(isinstance(rank, NativeSglangRank) for rank in ranks)
    return (events, report, history), natives


@pytest.mark.parametrize("chunk", range(4))
def test_random_workloads_match_the_python_rank(monkeypatch, chunk):
    monkeypatch.setenv("AISIMULATE_CHECK", "1")     # KV conserved at every visited time
    natives = 0
    for seed in range(chunk * 40, chunk * 40 + 40):
        payload = _payload(seed)
        expected, _ = _outcome(payload, SglangRank, monkeypatch)
        got, used = _outcome(payload, NativeSglangRank, monkeypatch)
        assert got == expected, f"seed {seed}"
        natives += used
    assert natives >= 30           # the C rank ran (not the fallback) in most workloads


def test_the_extension_switch_changes_nothing(monkeypatch):
    """With ``extension`` off the C rank runs every pass as its own event, as the twin."""
    for seed in range(6):
        payload = _payload(seed)
        expected, _ = _outcome(payload, SglangRank, monkeypatch)
        monkeypatch.setattr(NativeSglangRank, "extension", False)
        got, _ = _outcome(payload, NativeSglangRank, monkeypatch)
        monkeypatch.undo()
        assert got == expected, f"seed {seed}"


def test_a_watched_rank_becomes_the_python_rank(monkeypatch):
    """A router that reads KV events watches the ranks before any request: they are the
    Python rank then, with the same outcome."""
    payload = _payload(3)
    spec = payload.get("spec", payload)
    spec["topology"]["workers"]["initial_workers"] = 2
    spec.setdefault("adapters", {})["placement"] = {"provider": "kv_router"}
    expected, _ = _outcome(payload, SglangRank, monkeypatch)
    got, natives = _outcome(payload, NativeSglangRank, monkeypatch)
    assert got == expected and natives == 0


def test_supports_names_what_stays_in_python():
    spec = load_payload(json.dumps(_payload(1)))
    rank = spec.spec.engine.rank
    assert supports(rank, backend="c") is None
    assert rank_class(rank, backend="c") is NativeSglangRank
    assert "dp_size" in supports(rank, dp_size=2, backend="c")
    assert rank_class(rank, dp_size=2, backend="c") is SglangRank
    assert rank_class(rank, backend="python") is SglangRank
    assert supports(rank, backend="python") == "the C backend is not in use"


@pytest.mark.parametrize("block_size", [4, 16])
def test_synthetic_id_ranges_past_the_scratch_size(monkeypatch, block_size):
    """A synthetic prompt goes to the C rank as its id ranges through two scratch buffers;
    more ranges than they hold (here: buffers of one, prompts of a group prefix and a fresh
    range) grow them, and the run is the Python rank's. (Blocks of 16 ids: C fills a block's
    tokens eight at a time, then the rest, and the last block of 37 tokens is partial.)"""
    payload = {
        "spec": {"version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 2}},
                 "engine": {"rank": {"backend": "sglang", "block_size": block_size,
                                     "num_gpu_blocks": 400,
                                     "max_num_seqs": 8,
                                     "timing_model": {"type": "fixed", "prefill_ms": 3.0,
                                                      "decode_ms": 1.0}}},
                 "record_per_request": True},
        "traffic": {"source_type": "synthetic", "load_type": "poisson", "request_rate": 400.0,
                    "request_count": 60, "isl": 37, "osl": 5, "arrival_seed": 3,
                    "shared_prefix_ratio": 0.5, "num_prefix_groups": 3},
    }
    expected, _ = _outcome(payload, SglangRank, monkeypatch)
    scratch = sglang_native._SCRATCH
    monkeypatch.setattr(scratch, "firsts", native.ffi.new("uint32_t[]", 1))
    monkeypatch.setattr(scratch, "counts", native.ffi.new("uint32_t[]", 1))
    got, used = _outcome(payload, NativeSglangRank, monkeypatch)
    assert used == 2
    assert len(scratch.firsts) >= 2       # grown for a prefix and a fresh range
    assert got == expected


# the view fields the rank reads as memoryview items: (field, the rank's memory, its index)
_ITEMS = () if native.lib is None else (
    ("n_running", "_i64", sglang_native._N_RUNNING),
    ("n_waiting", "_i64", sglang_native._N_WAITING),
    ("rounds_left", "_i64", sglang_native._ROUNDS_LEFT),
    ("n_prebuilt", "_i64", sglang_native._N_PREBUILT),
    ("pf_count", "_i64", sglang_native._PF_COUNT),
    ("dec_batch", "_i64", sglang_native._DEC_BATCH),
    ("n_events", "_i64", sglang_native._N_EVENTS),
    ("decode_ms", "_f64", sglang_native._DECODE_MS),
    ("decode_known", "_i32", sglang_native._DECODE_KNOWN),
    ("formed", "_i32", sglang_native._FORMED),
    ("pass_effect", "_i32", sglang_native._PASS_EFFECT),
    ("stuck", "_i32", sglang_native._STUCK),
    ("extendable", "_i32", sglang_native._EXTENDABLE),
    ("retry_due", "_i32", sglang_native._RETRY_DUE),
    ("start_timed", "_i32", sglang_native._START_TIMED),
    ("start_end_ms", "_f64", sglang_native._START_END_MS),
    ("promoted", "_i32", sglang_native._PROMOTED),
)


@pytest.mark.skipif(native.BACKEND != "c", reason="the C ranks run on the C backend only")
@pytest.mark.parametrize("disaggregated", [False, True])
def test_view_items_read_the_view_fields(monkeypatch, disaggregated):
    """The hot view fields are read as items of the view's memory: after every call that
    changes them, each item is its cffi field (a wrong offset or width would differ)."""
    checked = []

    def compare(rank):
        view = rank._view
        values = [(name, getattr(rank, memory)[index], getattr(view, name))
                  for name, memory, index in _ITEMS]
        assert [(name, item) for name, item, _ in values] == \
            [(name, field) for name, _, field in values]
        checked.append(values)

    for method in ("schedule", "schedule_extended", "extend", "complete"):
        original = getattr(NativeSglangRank, method)

        def wrapped(self, *args, _original=original, **kwargs):
            try:
                return _original(self, *args, **kwargs)
            finally:
                compare(self)

        monkeypatch.setattr(NativeSglangRank, method, wrapped)
    payloads = [pd_payload(seed) for seed in range(8)] if disaggregated else [_payload(5)]
    for payload in payloads:
        build_simulation(load_payload(json.dumps(payload))).run()
    # and with schedule and extend as calls of their own (a worker binds no fused start)
    monkeypatch.setattr(NativeSglangRank, "schedule_extended", None)
    for payload in payloads:
        build_simulation(load_payload(json.dumps(payload))).run()
    assert len(checked) > 50
    # every field the runs move took more than one value (a read stuck at a constant shows)
    seen = {name: {value for values in checked for n, value, _ in values if n == name}
            for name, _, _ in _ITEMS}
    moving = ["n_running", "n_waiting", "pf_count", "dec_batch", "n_events", "decode_ms",
              "extendable", "start_timed", "start_end_ms"]
    moving += ["n_prebuilt", "retry_due", "promoted"] if disaggregated else ["formed",
                                                                           "pass_effect"]
    assert [name for name in moving if len(seen[name]) < 2] == [], seen

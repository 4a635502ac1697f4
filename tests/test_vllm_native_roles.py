"""The disaggregated roles of the C vLLM rank (engine/vllm_native_roles.py) against their twins,
VllmPrefillRank and VllmDecodeRank (engine/vllm_roles.py).

Seeded random request streams (test_vllm_native's: shared prefixes, authored outputs, pools
small enough to preempt or reject, vLLM or TensorRT-LLM no-evict, caching and chunking on and
off, max_model_len, max_num_seqs) through a prefill rank and one or two decode ranks joined by
a small handoff loop with runtime/disaggregated.py's calls: submit of a one-token copy, the
held source, accept, retry at idle ranks and pass ends, activation once the transfer is done
and the decode rank idle, release of the source once the prefill rank is idle. Both kinds of
rank must give the same passes, gauges, reservations, records and pool state, and keep the
runtime's invariant checker (runtime/checks.py) quiet at every step. Whole disaggregated
payloads run through the runtime must give the same report and records with either kind.
"""

from __future__ import annotations

import heapq
import math
import random

import attrs
import pytest

from aisimulate_core import native
from aisimulate_core.engine.request import SimRequest
from aisimulate_core.engine import vllm_native_roles
from aisimulate_core.engine.vllm_native import rank_class, supports
from aisimulate_core.engine.vllm_native_roles import NativeVllmDecodeRank, NativeVllmPrefillRank
from aisimulate_core.engine.vllm_roles import VllmDecodeRank, VllmPrefillRank
from aisimulate_core.kv.block_pool import BlockPool
from aisimulate_core.runtime.checks import check_block_rank
from aisimulate_core.spec.engine import EngineConfig
from aisimulate_core.errors import AisimError
from reference import HOST_KEYS, run_fixture
from test_vllm_native import (Recorder, make_request, random_engine, random_stream,
                              random_timer, ranged_request, ranged_stream, with_mtp)

pytestmark = pytest.mark.skipif(native.lib is None, reason="the C core is not built")

PYTHON = (VllmPrefillRank, VllmDecodeRank)
C = (NativeVllmPrefillRank, NativeVllmDecodeRank)


class Events:
    """The runtime's callbacks of one rank (runtime/disaggregated.py _RoleEvents): terminals
    and held sources, into a log shared by every rank (their order is compared)."""

    def __init__(self, log, held):
        self.log = log
        self.held = held

    def on_finish(self, r, end_ms, status):
        self.log.append(("finish", r.uuid, r.handoff[0], end_ms, status))

    def on_source_held(self, r, end_ms):
        self.log.append(("held", r.uuid, end_ms))
        self.held.append(r)


class _Key:
    idx = 0   # runtime/checks.py names the worker


def copy_of(request, max_output, kind, source=None):
    """A role's copy (runtime/disaggregated.py _copy); ``handoff``: (which copy, the source)."""
    copy = SimRequest(request.uuid, request.prompt, max_output, request.arrival_ms,
                      output_token_ids=request.output_token_ids)
    copy.handoff = (kind, source)
    return copy


def drive_roles(classes, setup, max_steps=6000):
    """The handoff of ``setup``'s stream over one prefill and ``setup["decode_ranks"]`` decode
    ranks; returns everything observable."""
    stream = setup["stream"]
    log, held = [], []
    prefill_cls, decode_cls = classes

    def make(cls, engine, seed, index=0):
        # (index: the scheduler index in the role's pool, an MTP rank's seed offset)
        rank = cls(engine, random_timer(random.Random(seed)),
                   BlockPool(engine.num_gpu_blocks, backend="c"), callbacks=Events(log, held),
                   scheduler_id=index)
        if setup["gauges"]:
            rank.capture_gauges = rank.watched = True
            rank._gauges = rank.live_gauges()
        if setup["fpm"]:   # a scaling policy's forward-pass metrics
            rank.fpm_on = rank.watched = True
        if setup["observer"] is not None:
            rank.observer = Recorder(*setup["observer"], log)
            rank.watched = True
            rank.pool.log_evictions(True)
        return rank

    prefill = make(prefill_cls, setup["prefill_engine"], setup["timer_seed"])
    decodes = [make(decode_cls, setup["decode_engine"], setup["timer_seed"] + 1 + i, i)
               for i in range(setup["decode_ranks"])]
    ranks = [prefill] + decodes
    # workers as rank indexes: the decode ranks alone, or one attention-DP group (its ranks
    # pass in lockstep, ending at the slowest one's end; a group never extends)
    workers = [[0]] + ([list(range(1, len(ranks)))] if setup["group"]
                       else [[i] for i in range(1, len(ranks))])
    worker_of = {i: w for w, members in enumerate(workers) for i in members}
    ends = [None] * len(workers)     # the pass in flight's end, per worker
    active = [()] * len(workers)     # its ranks with work in it
    parked = [False] * len(workers)  # a zero-time pass without effect: wait for the clock
    make_one = ranged_request if setup.get("ranged") else make_request
    requests = [make_one(i + 1, item) for i, item in enumerate(stream)]
    destinations = {}
    transfers = []                   # (done ms, order, destination, source)
    activations = []                 # transferred, waiting for their decode rank to be idle
    releases = []                    # sources whose release waits for the prefill rank
    order = 0
    trace = []
    nxt = 0
    t = 0.0
    delay = setup["transfer_ms"]

    def observe(kind, i, *extra):
        rank = ranks[i]
        row = (kind, i, t, len(rank.running), len(rank.waiting), bool(rank.partial),
               rank.pool.active(), rank.pool.inactive(), rank.pool.free_blocks(),
               rank.held_total, rank.preemptions, rank.holds_kv(), rank.telemetry_gauges(),
               rank.live_gauges(), rank.fpm_last) + extra
        if i:
            row += (rank.holds, len(rank.pending), rank.generation,
                    [r.uuid for r in rank.pending])
        else:
            row += (rank.held_sources, rank.submission_gauges())
        trace.append(row)
        check_block_rank(rank, _Key)

    def reserved(i, got):
        nonlocal order
        if got is None:
            return
        dest, missing = got
        trace.append(("reserved", i, t, dest.uuid, missing, dest.seq))
        heapq.heappush(transfers, (t + delay(dest.prompt_len, missing), order, dest))
        order += 1

    def indexed(rank, request):
        if setup["observer"] is not None:   # a kv_index router asks before placing
            trace.append(("indexed", rank.indexed_prefix(request.prompt.block_hashes(
                rank.block_size))))

    def place(source):
        i = 1 + source.uuid % len(decodes)
        rank = ranks[i]
        indexed(rank, source)
        dest = copy_of(requests[source.uuid - 1], requests[source.uuid - 1].max_output, "d",
                       source)
        if not rank.accept(dest):
            log.append(("failed", dest.uuid, t))
            releases.append(source)
            return
        destinations[dest.uuid] = dest
        observe("accept", i)
        w = worker_of[i]
        if ends[w] is None:
            reserved(i, rank.retry())
        elif len(workers[w]) == 1:   # an extended pass is cut: the next pass end retries
            end = rank.truncate(t)
            trace.append(("cut", i, t, ends[w], end))
            ends[w] = end

    for _ in range(max_steps):
        changed = False
        # pass completions due now, the prefill rank first; every rank of a worker retries
        for w, members in enumerate(workers):
            if ends[w] is not None and ends[w] <= t:
                ends[w] = None
                for i in active[w]:
                    ranks[i].complete()
                    observe("complete", i, ranks[i].pass_index, list(ranks[i].pass_ends)[-3:])
                for i in members:
                    if i:
                        reserved(i, ranks[i].retry())
                changed = True
        while held:
            place(held.pop(0))
            changed = True
        while transfers and transfers[0][0] <= t:
            activations.append(heapq.heappop(transfers)[2])
        for dest in list(activations):
            i = 1 + dest.uuid % len(decodes)
            if ends[worker_of[i]] is None:
                activations.remove(dest)
                ranks[i].activate(dest)
                parked[worker_of[i]] = False
                observe("activate", i, dest.uuid)
                releases.append(dest.handoff[1])
                reserved(i, ranks[i].retry())
                changed = True
        if ends[0] is None:
            while releases:
                prefill.release_source(releases.pop(0))
                parked[0] = False
                observe("release", 0)
                changed = True
        while nxt < len(requests) and requests[nxt].arrival_ms <= t:
            indexed(prefill, requests[nxt])
            prefill.submit(copy_of(requests[nxt], min(requests[nxt].max_output, 1), "p"))
            observe("submit", 0)
            parked[0] = False
            nxt += 1
            changed = True
        # idle workers with work start a pass
        for w, members in enumerate(workers):
            if ends[w] is not None or parked[w]:
                continue
            passes = [(i, ranks[i].schedule(t)) for i in members]
            passes = [(i, end) for i, end in passes if end is not None]
            if not passes:
                continue
            end = max(e for _, e in passes)
            if len(members) > 1:
                for i, _ in passes:
                    ranks[i].pass_end_ms = end
            elif w and setup["extend"]:
                end = ranks[members[0]].extend(transfers[0][0] if transfers else math.inf,
                                               1e12)
            ends[w] = end
            active[w] = [i for i, _ in passes]
            progressed = any(ranks[i].progressed() for i, _ in passes)
            trace.append(("pass", w, t, end, progressed,
                          [ranks[i].pass_effect for i, _ in passes]))
            if end == t and not progressed:
                parked[w] = True
            changed = True
        if changed:
            continue
        times = [e for e in ends if e is not None]
        if transfers:
            times.append(transfers[0][0])
        if nxt < len(requests):
            times.append(requests[nxt].arrival_ms)
        times = [x for x in times if x > t] or times
        if not times:
            break
        t = min(times)
        parked = [False] * len(workers)
    records = []
    for r in requests:
        dest = destinations.get(r.uuid)
        if dest is not None:
            records.append((r.uuid, dest.status, dest.admissions, dest.first_reused,
                            dest.max_reused, dest.preemptions, dest.out_limit,
                            dest.stretches if dest.status == 3 else None,
                            dest.generated if dest.status == 3 else None))
    stalls = [rank.stall_reason(rank.waiting[0]) for rank in decodes if rank.waiting]
    state = [(rank.pool.active(), rank.pool.inactive(), rank.pool.free_blocks(),
              rank.pool.cached(), rank.pool.evictions, rank.pool.live_seqs(), rank.preemptions,
              rank.committed_prefill_tokens, rank.decode_steps, rank.decode_tokens,
              rank.held_total, list(rank.pass_ends), list(rank.itl_diff), rank.break_gaps) for rank in ranks]
    for rank in ranks:
        rank.pool.check()
    # extended passes that began with activations' first tokens (VllmDecodeRank.extend)
    activation_runs = [rank.activation_runs for rank in decodes]
    return dict(trace=trace, log=log, records=records, stalls=stalls, state=state,
                activation_runs=activation_runs)


def random_setup(seed, n_requests, ranged=False, mtp=False):
    """``ranged``: synthetic prompts of id ranges (the C decode rank accepts them through
    aisim_vllm_accept_ranges, the Python one builds their runs); ``mtp``: both roles with MTP
    bursts (the prefill copies emit their one token without drawing)."""
    rng = random.Random(seed)
    stream = (ranged_stream if ranged else random_stream)(rng, n_requests)
    decode_engine = random_engine(rng, stream)
    prefill_engine = random_engine(rng, stream)
    # the roles share the backend and block size, as a payload's roles do
    prefill_engine = type(prefill_engine)(**{
        **{f: getattr(prefill_engine, f) for f in (
            "num_gpu_blocks", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
            "enable_prefix_caching", "enable_chunked_prefill", "preemption_mode")},
        "backend": decode_engine.backend, "block_size": decode_engine.block_size})
    transfer = rng.choice([0.0, 0.5, 3.0, None])
    if mtp:
        decode_engine = with_mtp(rng, decode_engine)
        prefill_engine = attrs.evolve(prefill_engine, **{
            f: getattr(decode_engine, f)
            for f in ("aic_nextn", "aic_nextn_accept_rates", "aic_mtp_seed")})
    return dict(
        ranged=ranged, stream=stream, prefill_engine=prefill_engine, decode_engine=decode_engine,
        timer_seed=rng.randrange(1 << 30), decode_ranks=rng.choice([1, 2, 3]),
        group=rng.random() < 0.3,
        gauges=rng.random() < 0.5, extend=rng.random() < 0.7, fpm=rng.random() < 0.3,
        observer=rng.choice([None, None, (True, True), (False, True), (True, False)]),
        transfer_ms=(lambda prompt, missing: 0.01 * missing) if transfer is None
        else (lambda prompt, missing, d=transfer: d))


def assert_same(seed, n_requests, ranged=False, mtp=False):
    setup = random_setup(seed, n_requests, ranged, mtp)
    expected = drive_roles(PYTHON, setup)
    got = drive_roles(C, setup)
    for key in expected:
        assert got[key] == expected[key], (seed, key, setup["decode_engine"])
    return expected


@pytest.mark.parametrize("block", range(6))
def test_random_handoffs_match_the_python_roles(block):
    for seed in range(block * 80, block * 80 + 80):
        assert_same(seed, 30)


def test_id_range_destinations_match_the_python_roles():
    """A synthetic destination's runs are made and hashed in C from its id ranges: the same
    reservations, hits and records as the runs the Python decode rank builds."""
    for seed in range(5000, 5060):
        assert_same(seed, 30, ranged=True)


def test_long_handoffs_match_the_python_roles():
    for seed in range(3000, 3016):
        assert_same(seed, 200)


def test_the_handoffs_reach_every_path():
    """The differential cases hold and release sources, reserve after waiting, preempt and
    reject destinations, fail handoffs, cut extended passes, pass in DP groups, extend a
    pass that gives activations their first token, and finish."""
    counts = dict(held=0, failed=0, finish=0, rejected=0, waited=0, preempted=0, hits=0,
                  cut=0, grouped=0, activation_runs=0)
    for seed in range(0, 120):
        out = assert_same(seed, 30)
        for entry in out["log"]:
            if entry[0] in ("held", "failed"):
                counts[entry[0]] += 1
            elif entry[0] == "finish" and entry[2] == "d":
                counts["finish" if entry[4] == "completed" else "rejected"] += 1
        counts["preempted"] += sum(state[6] for state in out["state"][1:])
        counts["waited"] += sum(1 for row in out["trace"] if row[0] == "complete" and row[1]
                                and row[-3] > 0)
        counts["hits"] += sum(1 for rec in out["records"] if rec[4])
        counts["cut"] += sum(1 for row in out["trace"] if row[0] == "cut")
        counts["grouped"] += sum(1 for row in out["trace"] if row[0] == "pass"
                                 and len(row[5]) > 1)
        counts["activation_runs"] += sum(out["activation_runs"])
    assert min(counts.values()) > 0, counts


def test_supports_takes_the_roles():
    for role, (native_cls, python_cls) in vllm_native_roles.RANK_CLASSES.items():
        assert supports(EngineConfig(backend="trtllm"), role=role, backend="c") is None
        assert rank_class(EngineConfig(backend="vllm"), role=role, backend="c") is native_cls
        assert rank_class(EngineConfig(backend="vllm"), role=role,
                          backend="python") is python_cls
    assert "worker_type" in supports(EngineConfig(backend="vllm", worker_type="prefill"),
                                     role="decode", backend="c")


def test_the_role_functions_check_their_arguments():
    ffi, lib = native.ffi, native.lib
    pool = BlockPool(8, backend="c")
    config = ffi.new("aisim_vllm_config *", dict(block_size=4, num_blocks=8, max_batched=64,
                                                 max_seqs=4, max_model_len=-1, caching=0,
                                                 chunked=1, lifo=1, role=3))
    box = ffi.new("aisim_vllm_rank **")
    assert lib.aisim_vllm_new(box, config, pool._pool) == native.EINVAL
    config.role = lib.AISIM_VLLM_AGGREGATED
    assert lib.aisim_vllm_new(box, config, pool._pool) == native.OK
    rank = ffi.gc(box[0], lib.aisim_vllm_free)
    out = ffi.new("int32_t *"), ffi.new("int64_t *"), ffi.new("int32_t *")
    # an aggregated rank has no role functions
    assert lib.aisim_vllm_accept(rank, 4, 1, 1, ffi.NULL, 0, ffi.NULL, ffi.NULL, 0, 0, 0) \
        == native.EINVAL
    assert lib.aisim_vllm_retry(rank, *out) == native.EINVAL
    assert lib.aisim_vllm_release_source(rank, 0) == native.EINVAL
    config.role = lib.AISIM_VLLM_DECODE
    assert lib.aisim_vllm_new(box, config, pool._pool) == native.OK
    decode = ffi.gc(box[0], lib.aisim_vllm_free)
    slot = lib.aisim_vllm_accept(decode, 4, 1, 1, ffi.NULL, 0, ffi.NULL, ffi.NULL, 0, 0, 0)
    assert slot == 0
    # not reserved yet: it cannot be activated
    assert lib.aisim_vllm_activate(decode, slot) == native.EINVAL
    assert lib.aisim_vllm_retry(decode, *out) == native.OK and out[0][0] == slot
    assert out[1][0] == 4 and pool.active() == 1
    assert lib.aisim_vllm_activate(decode, 7) == native.EINVAL
    assert lib.aisim_vllm_activate(decode, slot) == native.OK
    assert lib.aisim_vllm_activate(decode, slot) == native.EINVAL   # once only
    assert lib.aisim_vllm_retry(decode, *out) == native.OK and out[0][0] == -1
    assert lib.aisim_vllm_release_source(decode, slot) == native.EINVAL
    config.role = lib.AISIM_VLLM_PREFILL
    prefill_pool = BlockPool(8, backend="c")   # (borrowed by the rank: kept alive here)
    assert lib.aisim_vllm_new(box, config, prefill_pool._pool) == native.OK
    prefill = ffi.gc(box[0], lib.aisim_vllm_free)
    waiting = lib.aisim_vllm_submit(prefill, 4, 1, 1, ffi.NULL, 0, ffi.NULL, ffi.NULL, 0, 0, 0)
    # only a held source is released
    assert lib.aisim_vllm_release_source(prefill, waiting) == native.EINVAL
    assert lib.aisim_vllm_accept(prefill, 4, 1, 1, ffi.NULL, 0, ffi.NULL, ffi.NULL, 0, 0, 0) \
        == native.EINVAL


def _report(name):
    """A fixture's report through the runtime, or the one error line it stops with."""
    try:
        report = run_fixture(name)[0]
    except AisimError as exc:
        return str(exc)
    summary = {k: v for k, v in report.summary.items() if k not in HOST_KEYS}
    return summary, report.per_request


@pytest.mark.parametrize("name", [
    "b5_disagg_1p2d", "disagg_activation_order", "disagg_concurrency_trtllm",
    "disagg_decode_capacity_failure", "disagg_decode_preemption_poly", "disagg_dp_groups",
    "disagg_dp_groups_vllm", "disagg_poisson_pressure", "disagg_source_held_blocks_prefill",
    "disagg_trtllm_pressure", "disagg_decode_stall", "stall_disagg_prefill_parked_cutoff",
    "disagg_decode_recompute_zero_time", "disagg_transfer_destination_missing"])
@pytest.mark.skipif(native.BACKEND != "c", reason="the Python backend keeps the Python roles")
def test_whole_disaggregated_runs_match_the_python_roles(monkeypatch, name):
    """The runtime with the C roles, then with the Python roles: the same report."""
    built = []
    for cls in C:
        init = cls.__init__

        def counted(self, *args, _init=init, **kwargs):
            _init(self, *args, **kwargs)
            built.append(type(self))
        monkeypatch.setattr(cls, "__init__", counted)
    got = _report(name)
    assert set(built) == set(C)
    monkeypatch.setitem(vllm_native_roles.RANK_CLASSES, "prefill",
                        (VllmPrefillRank, VllmPrefillRank))
    monkeypatch.setitem(vllm_native_roles.RANK_CLASSES, "decode",
                        (VllmDecodeRank, VllmDecodeRank))
    built.clear()
    assert _report(name) == got
    assert built == []


@pytest.mark.parametrize("name", ["b5_disagg_1p2d", "disagg_activation_order",
                                  "disagg_poisson_pressure", "disagg_decode_preemption_poly"])
@pytest.mark.parametrize("classes", [C, PYTHON], ids=["c", "python"])
def test_a_pass_after_activations_extends_and_changes_nothing(monkeypatch, name, classes):
    """A decode pass whose only requests outside a stretch are activations taking their first
    token starts a decode-only run (``open_activations``); with it off, the same report."""
    if classes is C and native.BACKEND != "c":
        pytest.skip("the Python backend keeps the Python roles")
    decode_cls = classes[1]
    monkeypatch.setitem(vllm_native_roles.RANK_CLASSES, "prefill", (classes[0], classes[0]))
    monkeypatch.setitem(vllm_native_roles.RANK_CLASSES, "decode", (decode_cls, decode_cls))
    built = []
    init = decode_cls.__init__

    def kept(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)
    monkeypatch.setattr(decode_cls, "__init__", kept)
    got = _report(name)
    runs = sum(rank.activation_runs for rank in built)
    monkeypatch.setattr(decode_cls, "open_activations", False)
    built.clear()
    assert _report(name) == got
    assert sum(rank.activation_runs for rank in built) == 0
    if name == "b5_disagg_1p2d":
        assert runs > 0

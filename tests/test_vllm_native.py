"""The C vLLM rank (engine/vllm_native.py, csrc/vllm_rank.c) against its twin, VllmRank.

Seeded random request streams (prompt lengths, shared prefixes, outputs, arrivals) through both
ranks, on random engines (vLLM or TensorRT-LLM's no-evict admission, block size, a pool small
enough to preempt or reject, chunked prefill and
prefix caching on and off, LIFO and FIFO preemption, max_model_len, max_num_seqs,
max_num_batched_tokens), driven by the same small loop: both must give the same pass end times,
the same per-request admissions, token stretches and terminals, the same ITL bookkeeping and the
same block pool counters, pass after pass.
"""

from __future__ import annotations

import math
import random
import time
from array import array

import attrs
import pytest

from aisimulate_core import native
from aisimulate_core.engine.decode_run import MAX_PASSES
from aisimulate_core.engine.request import SimRequest
from aisimulate_core.engine.timing import FixedTiming, PolynomialTiming, StepTimer
from aisimulate_core.engine.vllm import VllmRank
from aisimulate_core import engine as engines
from aisimulate_core.engine.vllm_native import NativeVllmRank, rank_class, supports
from aisimulate_core.errors import NativeArgumentError, SimulationError
from aisimulate_core.kv.block_pool import BlockPool
from aisimulate_core.spec.engine import EngineConfig
from aisimulate_core.workload.prompt import IdRanges, Prompt
from reference import record_mismatches, run_fixture, summary_mismatches
from test_reference_parity import SYNTHETIC_CASES

pytestmark = pytest.mark.skipif(native.lib is None, reason="the C core is not built")


class Recorder:
    """A router's observer (runtime/simulation.py EngineEvents' interface) that writes down
    every notification, for both ranks to be compared."""

    def __init__(self, ordered, sends_kv, log):
        self.ordered = ordered
        self.sends_kv = sends_kv
        self.log = log

    def begin_pass(self, order):
        self.log.append(("begin", sorted(order.items())))

    def end_pass(self):
        self.log.append(("end",))

    def kv_stored(self, rank, hashes):
        self.log.append(("stored", list(hashes)))

    def kv_removed(self, rank, hashes):
        self.log.append(("removed", list(hashes)))

    def prefill_done(self, rank, request):
        self.log.append(("prefill", request.uuid))


class Terminals:
    """The runtime's callbacks: what finished, when, as what (into ``log``, which an observer
    may share, so that the order of both is compared)."""

    def __init__(self, log=None):
        self.log = [] if log is None else log

    def on_finish(self, r, end_ms, status):
        self.log.append((r.uuid, end_ms, status))


def random_engine(rng, stream):
    block_size = rng.choice([1, 2, 4, 16, 64])
    # a pool from smaller than the longest request (rejections) to roomy, mostly a few of them
    # (preemptions)
    longest = max(-(-(item[3] + item[4]) // block_size) for item in stream)
    scale = rng.choice([0.7, 1.0, 1.5, 2.0, 3.0, 5.0, 100.0])
    return EngineConfig(
        backend=rng.choice(["vllm", "vllm", "trtllm"]),
        block_size=block_size,
        num_gpu_blocks=max(1, int(longest * scale)),
        max_model_len=rng.choice([None, None, 50, 300]),
        max_num_seqs=rng.choice([1, 2, 4, 256]),
        max_num_batched_tokens=rng.choice([1, 8, 64, 64, 512, 8192]),
        enable_prefix_caching=rng.random() < 0.7,
        enable_chunked_prefill=rng.random() < 0.7,
        preemption_mode=rng.choice(["lifo", "fifo"]),
    )


MTP_RATES = [None, "1,1", "0", "1,0.5,0.25", "0.9,1,0,1,0.3", "0.5", "0,1", "1"]


def with_mtp(rng, engine):
    """``engine`` with MTP bursts (engine/mtp.py): aic_nextn 1..5, rates with 0 and 1 entries
    (a 1 accepts without a draw, a 0 draws and refuses), a seed."""
    return attrs.evolve(engine, aic_nextn=rng.randint(1, 5),
                        aic_nextn_accept_rates=rng.choice(MTP_RATES),
                        aic_mtp_seed=rng.choice([0, 42, rng.randrange(1 << 64)]))


def random_stream(rng, n):
    """(arrival ms, prompt runs, max output, authored outputs or None) per request."""
    groups = [[rng.randrange(1 << 20) for _ in range(rng.randint(1, 12))]
              for _ in range(rng.randint(1, 4))]
    run = rng.choice([1, 4, 16])
    t = 0.0
    stream = []
    burst = rng.random() < 0.3   # all at once: the pool fills, decoders preempt each other
    for _ in range(n):
        if not burst:
            t += rng.choice([0.0, rng.expovariate(0.05), rng.expovariate(0.5)])
        ids = list(rng.choice(groups)) if rng.random() < 0.7 else []
        ids += [rng.randrange(1 << 20) for _ in range(rng.randint(0, 10))]
        length = rng.randint(1, len(ids) * run + rng.randint(1, 3))
        max_output = rng.choice([0, 1, 2, 5, rng.randint(1, 60), rng.randint(20, 200)])
        outputs = None
        if rng.random() < 0.1:
            outputs = [rng.randrange(1 << 20) for _ in range(max_output)]
        stream.append((t, ids, run, length, max_output, outputs))
    return stream


def make_request(uuid, item):
    t, ids, run, length, max_output, outputs = item
    values = array("I", ids or [0])
    lengths = array("I", [run]) * len(values)
    total = 0
    for i, n in enumerate(lengths):   # cut the runs at the prompt length
        take = max(0, min(n, length - total))
        lengths[i] = take
        total += take
    if total < length:
        lengths[-1] += length - total
    return SimRequest(uuid, Prompt(values, lengths), max_output, t, output_token_ids=outputs)


class ProviderTiming(PolynomialTiming):
    """An external provider's shape: a model C does not evaluate, so decode times go through
    the C memo, filled from Python on each miss."""

    def decode_ms(self, batch_size, active_kv_tokens, mean_context_length, total_kv_tokens):
        return 0.25 + (batch_size * 7 + active_kv_tokens) % 13 / 3.0


def random_timer(rng):
    model = rng.choice([PolynomialTiming(), ProviderTiming(),
                        FixedTiming(rng.choice([0.0, 1.0, 3.5]), rng.choice([0.0, 0.5, 2.0]))])
    return StepTimer(model, speedup_ratio=rng.choice([1.0, 1.0, 1.7]))


def ranged_stream(rng, n):
    """``random_stream``'s items for synthetic prompts: ids in one or two consecutive ranges
    (a group prefix, then fresh ids), the prompt no longer than its ids' runs."""
    groups = [(rng.randrange(1 << 20), rng.randint(1, 12)) for _ in range(rng.randint(1, 3))]
    run = rng.choice([1, 4, 16, 64])
    t, stream = 0.0, []
    for _ in range(n):
        t += rng.choice([0.0, rng.expovariate(0.05), rng.expovariate(0.5)])
        ranges = [rng.choice(groups)] if rng.random() < 0.6 else []
        ranges.append((rng.randrange(1 << 31), rng.randint(1, 10)))
        ids = [first + i for first, count in ranges for i in range(count)]
        length = rng.randint(1, len(ids) * run)
        max_output = rng.choice([0, 1, 2, 5, rng.randint(1, 60)])
        stream.append((t, ids, run, length, max_output, None, ranges))
    return stream


def ranged_request(uuid, item):
    """The request of a ``ranged_stream`` item, its prompt as the synthetic workload makes it
    (``Prompt.from_hash_ids`` over ``IdRanges``: the C rank takes the ranges, the Python rank
    builds the runs)."""
    t, _, run, length, max_output, _, ranges = item
    return SimRequest(uuid, Prompt.from_hash_ids(IdRanges(ranges), length, run), max_output, t)


def drive(rank_cls, engine, timer_seed, stream, truncating, max_passes=4000, timing=None,
          run_passes=MAX_PASSES, gauges=False, observer=None, fpm_rows=False,
          make=make_request, index=True):
    """Run ``stream`` through one rank; returns everything observable, pass by pass, and the
    CPU time of the loop (requests are made before it). ``timing="b1"``: the benchmark's fixed
    10/5 ms (bench/vllm_native_ab.py); ``gauges``: telemetry's gauges on."""
    if timing == "b1":
        timer = StepTimer(FixedTiming(10.0, 5.0))
    else:
        timer = random_timer(random.Random(timer_seed))
    pool = BlockPool(engine.num_gpu_blocks, backend="c")
    cb = Terminals()
    rank = rank_cls(engine, timer, pool, callbacks=cb, scheduler_id=3)
    pool = rank.pool   # (the Python state_cache rank runs on a pool of its own)
    if observer is not None:   # (ordered, sends_kv) of a router watching, as watch_engines
        rank.observer = Recorder(*observer, cb.log)
        rank.watched = True
        pool.log_evictions(True)
    if fpm_rows:   # a scaling policy's forward-pass metrics, as runtime/cluster.py
        rank.fpm_on = True
        rank.watched = True
    seen = []     # telemetry's gauges after each submission and completion
    if gauges:    # as runtime/simulation.py turns them on
        rank.capture_gauges = True
        rank.watched = True
        rank._gauges = rank.live_gauges()
    requests = [make(i + 1, item) for i, item in enumerate(stream)]
    trace = []
    nxt = 0
    t = 0.0
    started = time.process_time()
    # max_passes passes at most, however many events they take (a rank extends its pass
    # into a run of them)
    for _ in range(4 * max_passes):
        if len(rank.pass_ends) >= max_passes:
            break
        while nxt < len(requests) and requests[nxt].arrival_ms <= t:
            if observer is not None and index:   # a kv_index router asks before placing
                seen.append(rank.indexed_prefix(requests[nxt].prompt.block_hashes(
                    engine.block_size)))
            rank.submit(requests[nxt])
            seen.append(rank.telemetry_gauges())
            nxt += 1
        arrival = requests[nxt].arrival_ms if nxt < len(requests) else math.inf
        end = rank.schedule(t)
        if end is None:
            if arrival == math.inf:
                break
            t = arrival
            continue
        horizon = math.inf if truncating else arrival
        end = rank.extend(horizon, 1e12, min(run_passes, max_passes - len(rank.pass_ends)))
        # requests arriving while the pass is in flight join the queue then
        while nxt < len(requests) and requests[nxt].arrival_ms < end:
            if observer is not None and index:
                seen.append(rank.indexed_prefix(requests[nxt].prompt.block_hashes(
                    engine.block_size)))
            rank.submit(requests[nxt])
            seen.append(rank.telemetry_gauges())   # a submission while the pass is in flight
            end = rank.truncate(requests[nxt].arrival_ms)
            nxt += 1
        progressed = rank.progressed()
        trace.append((t, end, rank.pass_effect, progressed, len(rank.running),
                      len(rank.waiting), pool.active(), pool.inactive(), rank.held_total,
                      rank.preemptions, rank.pending_prefill_tokens()))
        rank.complete()
        seen.append((rank.telemetry_gauges(), rank.completed_preemptions, rank.fpm_last))
        if end == t and not progressed:
            if nxt >= len(requests):
                break   # nothing can start: the runtime's stall
            t = requests[nxt].arrival_ms
        else:
            t = end
    loop_cpu_s = time.process_time() - started
    # the C rank brings a request's tokens up to date when it finishes (its admissions and
    # preemptions when they happen)
    records = [(r.uuid, r.status, r.admissions, r.first_reused, r.max_reused, r.preemptions,
                r.out_limit) + ((r.stretches, r.generated) if r.status == 3 else ())
               for r in requests]
    pool.check()
    return dict(
        trace=trace, gauges=seen, terminals=cb.log, records=records, pass_ends=list(rank.pass_ends),
        itl_diff=list(rank.itl_diff), break_gaps=rank.break_gaps,
        counters=(pool.active(), pool.inactive(), pool.free_blocks(), pool.cached(),
                  pool.evictions, pool.live_seqs(), rank.preemptions,
                  rank.committed_prefill_tokens, rank.decode_steps, rank.decode_tokens,
                  rank.held_total,
                  len(rank.running), len(rank.waiting), rank.pass_index),
        waiting=[r.uuid for r in rank.waiting], running=[r.uuid for r in rank.running]), loop_cpu_s


def assert_same(seed, n_requests, mtp=False, state=False):
    """``mtp``: with MTP bursts (with_mtp); ``state``: with a state cache (the engine's
    ``tweak``, tests/test_vllm_native_state.py's with_state), each through its Python twin."""
    rng = random.Random(seed)
    stream = random_stream(rng, n_requests)
    engine = random_engine(rng, stream)
    if mtp:
        engine = with_mtp(rng, engine)
    python_rank = VllmRank
    if state:
        engine, python_rank = state(rng, engine)
    truncating = rng.random() < 0.3
    timer_seed = rng.randrange(1 << 30)
    # short runs, and longer ones than the C loop takes (the Python loop then)
    run_passes = rng.choice([MAX_PASSES, MAX_PASSES, 3, MAX_PASSES + 1])
    gauges = rng.random() < 0.5
    observer = rng.choice([None, None, (True, True), (False, True), (True, False),
                           (False, False)])
    fpm_rows = rng.random() < 0.4
    expected, _ = drive(python_rank, engine, timer_seed, stream, truncating,
                        run_passes=run_passes, gauges=gauges, observer=observer,
                        fpm_rows=fpm_rows)
    if mtp or state:
        # the Python rank runs every MTP pass as its own event, the C rank its decode-only
        # passes as one (NativeVllmMtpRank.extend): event by event with runs of one pass,
        # then the same passes, records and state with its runs (fewer events: no trace)
        single, _ = drive(NativeVllmRank, engine, timer_seed, stream, truncating,
                          run_passes=1, gauges=gauges, observer=observer, fpm_rows=fpm_rows)
        for key in expected:
            assert single[key] == expected[key], (seed, key, engine)
    got, _ = drive(NativeVllmRank, engine, timer_seed, stream, truncating,
                   run_passes=run_passes, gauges=gauges, observer=observer, fpm_rows=fpm_rows)
    for key in expected:
        if not ((mtp or state) and key in ("trace", "gauges")):
            assert got[key] == expected[key], (seed, key, engine)
    return expected


@pytest.mark.parametrize("block", range(8))
def test_random_streams_match_the_python_rank(block):
    for seed in range(block * 40, block * 40 + 40):
        assert_same(seed, 30)


def test_id_range_prompts_match_the_python_rank():
    """A synthetic prompt's runs are made and hashed in C from its id ranges
    (aisim_vllm_submit_ranges): the same hashes, so the same prefix hits, as the runs the
    Python rank builds."""
    for seed in range(60):
        rng = random.Random(seed)
        stream = ranged_stream(rng, 30)
        engine = random_engine(rng, stream)
        timer_seed = rng.randrange(1 << 30)
        # a router's KV events show the hashes themselves (a router asking the index first
        # would build the runs: it does not here)
        kwargs = dict(make=ranged_request, observer=(False, True), index=False)
        expected, _ = drive(VllmRank, engine, timer_seed, stream, False, **kwargs)
        got, _ = drive(NativeVllmRank, engine, timer_seed, stream, False, **kwargs)
        for key in expected:
            assert got[key] == expected[key], (seed, key, engine)


def test_an_id_range_prompt_is_never_built_in_python():
    engine = EngineConfig(block_size=4, num_gpu_blocks=64)
    rank = NativeVllmRank(engine, StepTimer(FixedTiming(10.0, 5.0)),
                          BlockPool(64, backend="c"), callbacks=Terminals())
    ranged = SimRequest(1, Prompt.from_hash_ids(IdRanges([(7, 3), (1 << 31, 5)]), 30, 4), 2, 0.0)
    rank.submit(ranged)
    assert ranged.prompt._source is not None     # no runs made
    # ranges shorter than the prompt (or ids past u32): the runs decide, here refused
    short = SimRequest(2, Prompt.from_hash_ids(IdRanges([(7, 2)]), 30, 4), 2, 0.0)
    with pytest.raises(NativeArgumentError):
        rank.submit(short)
    assert short.prompt._source is None
    assert len(rank.waiting) == 1


def test_long_streams_match_the_python_rank():
    for seed in range(1000, 1012):
        assert_same(seed, 300)


def test_the_streams_reach_every_path():
    """The differential cases preempt, reject, reuse cached prefixes, extend and finish."""
    preempted = rejected = reused = extended = finished = 0
    for seed in range(0, 120):
        out = assert_same(seed, 30)
        preempted += out["counters"][6]
        terminals = [entry for entry in out["terminals"] if len(entry) == 3]
        rejected += sum(1 for _, _, status in terminals if status == "rejected")
        finished += sum(1 for _, _, status in terminals if status == "completed")
        reused += sum(1 for rec in out["records"] if rec[5])
        extended += len(out["pass_ends"]) > len(out["trace"])
    assert min(preempted, rejected, reused, extended, finished) > 0, (
        preempted, rejected, reused, extended, finished)


def test_supports_names_what_it_refuses():
    assert supports(EngineConfig(backend="vllm"), backend="c") is None
    assert supports(EngineConfig(backend="trtllm"), backend="c") is None
    assert "sglang" in supports(EngineConfig(backend="sglang"), backend="c")
    assert supports(EngineConfig(backend="vllm"), dp_size=2, backend="c") is None
    assert supports(EngineConfig(backend="vllm"), role="prefill", backend="c") is None
    assert "role" in supports(EngineConfig(backend="vllm"), role="router", backend="c")
    assert "C backend" in supports(EngineConfig(backend="vllm"), backend="python")
    assert "Python" in supports(EngineConfig(backend="vllm"), pool=BlockPool(4, backend="python"),
                                backend="c")


def test_ranks_beyond_int64_counts_keep_the_python_rank():
    assert "num_gpu_blocks" in supports(EngineConfig(backend="vllm", num_gpu_blocks=2**64 - 1),
                                        backend="c")


@pytest.fixture
def c_ranks(monkeypatch):
    """Every vLLM and TensorRT-LLM rank the runtime builds is the class ``rank_class`` picks
    (the C rank where supported; the runtime may pick it itself already); yields the C ranks
    built."""
    built = []
    init = NativeVllmRank.__init__

    def counted(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    def make(engine, timer, pool, **kwargs):
        return rank_class(engine)(engine, timer, pool, **kwargs)
    monkeypatch.setattr(NativeVllmRank, "__init__", counted)
    monkeypatch.setitem(engines.ENGINES, "vllm", make)
    monkeypatch.setitem(engines.ENGINES, "trtllm", make)
    yield built


@pytest.mark.parametrize("name", SYNTHETIC_CASES + [
    "b1_poisson_fixed", "sem_two_isl1000_budget512", "sem_poly_isl1000_osl4",
    "reject_vllm_max_model_len_isl16m", "reject_vllm_over_capacity_isl1e7",
    "trtllm_full_cache_hit", "trtllm_kv_pressure", "trtllm_poisson_polynomial",
    "trtllm_prefix_reuse", "reject_trtllm_max_model_len_isl16m",
    "reject_trtllm_over_capacity_isl1e7"])
@pytest.mark.skipif(native.BACKEND != "c", reason="the Python backend keeps the Python rank")
def test_the_c_rank_in_the_runtime_matches_the_reference(c_ranks, name):
    report, fixture = run_fixture(name)
    assert c_ranks
    assert summary_mismatches(report.summary, fixture["summary"]) == []
    if fixture.get("per_request") is not None:
        assert record_mismatches(report.per_request, fixture["per_request"]) == []


def test_the_c_rank_checks_its_arguments():
    ffi, lib = native.ffi, native.lib
    pool = BlockPool(8, backend="c")
    config = ffi.new("aisim_vllm_config *", dict(block_size=4, num_blocks=8, max_batched=64,
                                                 max_seqs=4, max_model_len=-1, caching=1,
                                                 chunked=1, lifo=1))
    box = ffi.new("aisim_vllm_rank **")
    for field, bad in (("block_size", 0), ("block_size", 65537), ("num_blocks", 0),
                       ("max_model_len", -2)):
        good = getattr(config, field)
        setattr(config, field, bad)
        assert lib.aisim_vllm_new(box, config, pool._pool) == native.EINVAL
        setattr(config, field, good)
    assert lib.aisim_vllm_new(box, config, ffi.NULL) == native.EINVAL
    assert lib.aisim_vllm_new(box, config, pool._pool) == native.OK
    rank = ffi.gc(box[0], lib.aisim_vllm_free)
    values, lengths = ffi.new("uint32_t[]", [7, 8]), ffi.new("uint32_t[]", [4, 3])
    # the runs must be the prompt: 7 tokens, not 8
    assert lib.aisim_vllm_submit(rank, 8, 2, 2, ffi.NULL, 0, values, lengths, 2, 0, 0) \
        == native.EINVAL
    assert lib.aisim_vllm_submit(rank, -1, 2, 2, ffi.NULL, 0, ffi.NULL, ffi.NULL, 0, 0, 0) \
        == native.EINVAL
    assert lib.aisim_vllm_submit(rank, 7, 2, 2, ffi.NULL, 0, values, lengths, 2, 0, 0) == 0
    assert lib.aisim_vllm_complete(rank, -1, 0) == native.EINVAL
    # a report needs an observed rank
    assert lib.aisim_vllm_complete(rank, 0, lib.AISIM_VLLM_REPORT_KV) == native.EINVAL
    assert lib.aisim_vllm_queue(rank, 2, ffi.NULL, 0) == native.EINVAL
    assert lib.aisim_vllm_queue(rank, 1, ffi.NULL, 0) == 1    # the count, nothing copied
    stop = ffi.new("int64_t *")
    assert lib.aisim_vllm_extension_input(rank, ffi.NULL, ffi.NULL, 0, ffi.NULL) \
        == native.EINVAL
    assert lib.aisim_vllm_extension_input(rank, ffi.NULL, ffi.NULL, 0, stop) == 0
    assert lib.aisim_vllm_schedule(ffi.NULL, 0.0) == native.EINVAL


def drive_group(rank_cls, engine, stream, size):
    """``stream`` over an attention-DP group of ``size`` ranks (runtime/worker.py's grouped
    pass: each rank with work forms its pass, all end at the slowest one's end)."""
    ranks = [rank_cls(engine, StepTimer(PolynomialTiming()),
                      BlockPool(engine.num_gpu_blocks, backend="c"), callbacks=Terminals(),
                      dp_rank=d, scheduler_id=d)
             for d in range(size)]
    requests = [make_request(i + 1, item) for i, item in enumerate(stream)]
    nxt, t = 0, 0.0
    wave = 0      # prefill_schedule_interval's grouped passes (the worker's wave)
    for _ in range(3000):
        while nxt < len(requests) and requests[nxt].arrival_ms <= t:
            ranks[nxt % size].submit(requests[nxt])
            nxt += 1
        for rank in ranks:
            if rank.psi is not None:
                rank.psi.wave = wave
        ends = [(rank, rank.schedule(t)) for rank in ranks]
        active = [(rank, end) for rank, end in ends if end is not None]
        if not active:
            if nxt >= len(requests):
                break
            t = requests[nxt].arrival_ms
            continue
        end = max(e for _, e in active)
        for rank, _ in active:
            rank.pass_end_ms = end
        progressed = any(rank.progressed() for rank, _ in active)
        for rank, _ in active:
            rank.complete()
        wave = wave + 1 if any(rank.has_work() for rank in ranks) else 0
        if end == t and not progressed:
            if nxt >= len(requests):
                break
            t = requests[nxt].arrival_ms
        else:
            t = end
    return ([list(rank.pass_ends) for rank in ranks], [rank.cb.log for rank in ranks],
            [(r.uuid, r.status, r.admissions, r.preemptions)
             + ((r.stretches,) if r.status == 3 else ()) for r in requests],
            [(rank.pool.active(), rank.pool.inactive(), rank.preemptions, rank.decode_steps,
              rank.decode_tokens) for rank in ranks])


@pytest.mark.parametrize("mtp", [False, True, "psi"], ids=["plain", "mtp", "psi"])
def test_attention_dp_groups_match_the_python_rank(mtp):
    """(with MTP: each rank draws from its own generator, seed + its scheduler index; "psi":
    vLLM's prefill_schedule_interval gate, engine/vllm_psi.py, with the group's wave)"""
    for seed in range(2000, 2040 if mtp != "psi" else 2120):
        rng = random.Random(seed)
        stream = random_stream(rng, 30)
        engine = random_engine(rng, stream)
        size = rng.choice([2, 3])
        if mtp == "psi":
            engine = attrs.evolve(engine, backend="vllm",
                                  prefill_schedule_interval=rng.choice([2, 3, 4, 8]))
            assert supports(engine, dp_size=size, backend="c") is None
        elif mtp:
            engine = with_mtp(rng, engine)
        assert drive_group(NativeVllmRank, engine, stream, size) == \
            drive_group(VllmRank, engine, stream, size), seed


@pytest.mark.skipif(native.BACKEND != "c", reason="the Python backend keeps the Python rank")
def test_the_build_asks_supports_once_per_role_and_a_rank_made_alone_asks_itself(monkeypatch):
    """worker_factory's one ``supports`` call vouches for every rank it makes on a C pool
    (``supported=True``); a rank made without it still checks its engine and pool."""
    import json
    from aisimulate_core import build_simulation, load_payload
    from aisimulate_core.engine import vllm_native
    from aisimulate_core.runtime import build
    from test_semantics_cases import bare_spec, req
    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs.get("pool"))
        return supports(*args, **kwargs)
    monkeypatch.setattr(build, "supports", counted)
    monkeypatch.setattr(vllm_native, "supports", counted)
    spec = bare_spec([req(0, 16, 4)])
    spec["topology"]["workers"]["initial_workers"] = 3
    sim = build_simulation(load_payload(json.dumps(spec)))
    assert calls == [None]
    assert [type(rank) for w in sim.workers for rank in w.ranks] == [NativeVllmRank] * 3
    with pytest.raises(SimulationError, match="does not take this rank: a Python block pool"):
        NativeVllmRank(EngineConfig(backend="vllm", num_gpu_blocks=4), StepTimer(FixedTiming(10.0, 5.0)),
                       BlockPool(4, backend="python"), callbacks=None)
    assert len(calls) == 2

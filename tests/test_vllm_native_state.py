"""``state_cache`` on the C vLLM rank (csrc/vllm_rank.c aisim_vllm_set_state, engine/vllm_native.py
``NativeVllmStateRank``) against its twin and specification, engine/vllm_state_cache.py's
``StateCacheRank`` (FEATURES.md §7).

Seeded random streams (tests/test_vllm_native.py's) on random vLLM engines with 1 to 3 working-
state blocks a request, pools small enough to preempt (LIFO, FIFO) and to reject running requests
whose next step can never fit, prefix caching on and off (checkpoints published, preserved,
discarded, restored), watched by routers, telemetry and forward-pass metrics or not: the C rank,
event by event and with its decode-only runs (several passes an event), must give the Python
rank's passes, records, ITL bookkeeping, gauges, router events, decode counters and pool state.
"""

from __future__ import annotations

import random

import attrs
import pytest

from aisimulate_core import native
from aisimulate_core.engine.request import SimRequest
from aisimulate_core.engine.timing import FixedTiming, StepTimer
from aisimulate_core.engine.vllm_native import NativeVllmRank, NativeVllmStateRank, supports
from aisimulate_core.engine.vllm_state_cache import StateCacheRank, state_key
from aisimulate_core.kv.block_pool import BlockPool
from aisimulate_core.spec.engine import EngineConfig, StateCacheConfig
from aisimulate_core.workload.prompt import Prompt
import test_vllm_native as aggregated

pytestmark = pytest.mark.skipif(native.lib is None, reason="the C core is not built")


def with_state(rng, engine):
    """``engine`` as a vLLM engine with a state cache of 1 to 3 blocks a request (its pool
    grown to hold one token block and one state at least), and the Python twin's class."""
    blocks = rng.choice([1, 1, 2, 3])
    per_token = 1000
    size = blocks * engine.block_size * per_token - rng.choice([0, per_token // 2])
    engine = attrs.evolve(
        engine, backend="vllm", kv_cache_bytes_per_token=per_token,
        state_cache=StateCacheConfig(bytes_per_request=size),
        num_gpu_blocks=max(engine.num_gpu_blocks + rng.choice([0, blocks, 2 * blocks]),
                           blocks + 1),
        enable_prefix_caching=rng.random() < 0.85)
    return engine, StateCacheRank


def assert_same(seed, n_requests):
    return aggregated.assert_same(seed, n_requests, state=with_state)


@pytest.mark.parametrize("block", range(5))
def test_state_cache_random_streams_match_the_python_rank(block):
    for seed in range(block * 40, block * 40 + 40):
        assert_same(seed, 30)


def test_long_state_cache_streams_match_the_python_rank():
    for seed in range(1000, 1008):
        assert_same(seed, 300)


def test_the_state_cache_streams_reach_every_path():
    """The cases preempt (LIFO and FIFO), reject (at admission and running requests mid-way),
    restore from checkpoints, and run decode-only passes several to an event, cut by arrivals
    too (truncating: the passes replayed after a submission admit nothing)."""
    preempted = {"lifo": 0, "fifo": 0}
    rejected_running = restored = extended = truncated = 0
    for seed in range(0, 120):
        rng = random.Random(seed)
        stream = aggregated.random_stream(rng, 30)
        engine = aggregated.random_engine(rng, stream)
        out = assert_same(seed, 30)
        preempted[engine.preemption_mode] += out["counters"][6]
        rejected_running += sum(1 for rec in out["records"] if rec[1] == 3 and rec[2]
                                and any(entry[0] == rec[0] and entry[-1] == "rejected"
                                        for entry in out["terminals"] if len(entry) == 3))
        restored += sum(1 for rec in out["records"] if rec[4])
    for seed in range(40):
        rng = random.Random(seed)
        stream = aggregated.random_stream(rng, 30)
        engine, _ = with_state(rng, aggregated.random_engine(rng, stream))
        for truncating in (False, True):
            got, _ = aggregated.drive(NativeVllmRank, engine, seed, stream, truncating)
            expected, _ = aggregated.drive(StateCacheRank, engine, seed, stream, truncating)
            runs = len(got["pass_ends"]) > len(got["trace"])
            extended += runs
            truncated += runs and truncating
            assert got["records"] == expected["records"], seed
            assert got["pass_ends"] == expected["pass_ends"], seed
    assert min(*preempted.values(), rejected_running, restored, extended, truncated) > 0, (
        preempted, rejected_running, restored, extended, truncated)


def test_the_c_rank_takes_state_cache():
    """state_cache runs on the C rank, aggregated (its own class, which the plain C loop leaves
    to the runtime); with MTP bursts it stays on the Python rank."""
    engine = EngineConfig(backend="vllm", block_size=16, num_gpu_blocks=64,
                          kv_cache_bytes_per_token=1000,
                          state_cache=StateCacheConfig(bytes_per_request=32000))
    assert supports(engine, backend="c") is None
    assert "MTP" in supports(attrs.evolve(engine, aic_nextn=2), backend="c")
    rank = NativeVllmRank(engine, StepTimer(FixedTiming(10.0, 5.0)), BlockPool(64, backend="c"),
                          callbacks=aggregated.Terminals())
    assert type(rank) is NativeVllmStateRank and rank.state_blocks == 2
    # FEATURES.md §7: a 64-token prompt holds 6 active blocks after its prefill, 7 decoding
    request = SimRequest(1, Prompt.from_tokens(list(range(64))), 4, 0.0)
    rank.submit(request)
    rank.schedule(0.0)
    rank.complete()
    assert rank.pool.active() == 6
    rank.schedule(rank.pass_end_ms)
    assert rank.pool.active() == 7


def test_the_c_pool_keeps_checkpoints_as_the_python_pool():
    """aisim_kv_uncache / discard / key_refs against StatePool's uncache / discard / has_key on
    the same operations: the same counters and answers."""
    from aisimulate_core.engine.vllm_state_cache import StatePool
    ffi, lib = native.ffi, native.lib
    rng = random.Random(5)
    for _ in range(30):
        c_pool, py_pool = BlockPool(12, backend="c"), StatePool(12)
        keys = [state_key(rng.randrange(1 << 64), i) for i in range(6)]
        seqs = []
        for _ in range(60):
            op = rng.randrange(5)
            if op == 0 or not seqs:
                n = rng.randint(1, 3)
                if n <= py_pool.allocatable():
                    a, b = c_pool.new_seq(), py_pool.new_seq()
                    c_pool.allocate(a, n)
                    py_pool.allocate(b, n)
                    seqs.append((a, b, n))
            elif op == 1:
                a, b, n = rng.choice(seqs)
                chosen = [rng.choice(keys) for _ in range(n)]
                try:
                    py_pool.commit(b, chosen, 0, n)
                except Exception:
                    continue
                c_pool.commit(a, chosen, 0, n)
            elif op == 2:
                a, b, n = seqs.pop(rng.randrange(len(seqs)))
                c_pool.release(a)
                py_pool.release(b)
            elif op == 3:
                a, b, _ = rng.choice(seqs)
                assert lib.aisim_kv_uncache(c_pool._pool, a) == native.OK
                py_pool.uncache(b)
            else:
                block, key = rng.randrange(14), rng.choice(keys)
                before = py_pool.free_blocks()
                py_pool.discard(block, key)
                assert lib.aisim_kv_discard(c_pool._pool, block, key) == \
                    py_pool.free_blocks() - before
            for key in keys:
                refs = lib.aisim_kv_key_refs(c_pool._pool, key)
                assert (refs >= 0) == py_pool.has_key(key)
                if refs >= 0:
                    assert refs == py_pool._ref[py_pool._index[key]]
            assert (c_pool.active(), c_pool.inactive(), c_pool.free_blocks(), c_pool.cached()) \
                == (py_pool.active(), py_pool.inactive(), py_pool.free_blocks(), py_pool.cached())
        c_pool.check()
        py_pool.check()
    assert lib.aisim_kv_uncache(c_pool._pool, 999) == native.EBADSEQ
    assert lib.aisim_kv_discard(c_pool._pool, -1, 0) == native.EINVAL
    assert lib.aisim_kv_key_refs(ffi.NULL, 0) == native.EINVAL


def test_the_state_set_up_checks_its_arguments():
    ffi, lib = native.ffi, native.lib
    pool = BlockPool(8, backend="c")

    def rank(**fields):
        config = ffi.new("aisim_vllm_config *", dict(
            dict(block_size=4, num_blocks=8, max_batched=64, max_seqs=4, max_model_len=-1,
                 caching=1, chunked=1, lifo=1), **fields))
        box = ffi.new("aisim_vllm_rank **")
        assert lib.aisim_vllm_new(box, config, pool._pool) == native.OK
        return ffi.gc(box[0], lib.aisim_vllm_free)
    plain = rank()
    for blocks in (0, 9):
        assert lib.aisim_vllm_set_state(plain, blocks) == native.EINVAL
    assert lib.aisim_vllm_set_state(rank(no_evict=1), 2) == native.EINVAL
    assert lib.aisim_vllm_set_state(rank(role=2), 2) == native.EINVAL
    assert lib.aisim_vllm_set_state(plain, 2) == native.OK
    assert lib.aisim_vllm_set_state(plain, 2) == native.EINVAL   # once

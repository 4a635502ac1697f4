"""MTP bursts on the C vLLM / TensorRT-LLM rank (csrc/vllm_rank.c aisim_vllm_set_mtp) against
their twin and specification, engine/mtp.py on the Python rank (FEATURES.md §1).

Seeded random streams (tests/test_vllm_native.py's) with aic_nextn 1..5, acceptance rates with
0 and 1 entries and random seeds, on engines that preempt by LIFO or FIFO under KV pressure,
reject past max_model_len, reuse prefixes (vLLM loses one block of a hit, TensorRT-LLM not) or
admit by TensorRT-LLM's no-evict reservation: aggregated ranks, attention-DP groups and the
disaggregated handoff (tests/test_vllm_native_roles.py's) must give the same passes, records,
ITL bookkeeping, gauges, router events and decode counters as the Python rank.
"""

from __future__ import annotations

import json
import random

import pytest

from aisimulate_core import native, run_replay
from aisimulate_core.engine.mtp import MtpBursts
from aisimulate_core.engine.request import SimRequest
from aisimulate_core.engine.timing import FixedTiming, StepTimer
from aisimulate_core.engine.vllm import VllmRank
from aisimulate_core.engine.vllm_native import NativeVllmMtpRank, NativeVllmRank, supports
from aisimulate_core.kv.block_pool import BlockPool
from aisimulate_core.spec.engine import EngineConfig
from aisimulate_core.workload.prompt import Prompt
from aisimulate_core.workload.rng import PyStdRng
import test_vllm_native as aggregated
from test_features_vllm import _mtp_payload
import test_vllm_native_roles as roles

pytestmark = pytest.mark.skipif(native.lib is None, reason="the C core is not built")


@pytest.mark.parametrize("block", range(5))
def test_mtp_random_streams_match_the_python_rank(block):
    for seed in range(block * 40, block * 40 + 40):
        aggregated.assert_same(seed, 30, mtp=True)


def test_long_mtp_streams_match_the_python_rank():
    for seed in range(1000, 1008):
        aggregated.assert_same(seed, 300, mtp=True)


def test_the_mtp_streams_reach_every_path():
    """The MTP cases preempt (by LIFO and FIFO), reject, reuse cached prefixes, burst more than
    one token a step, and run TensorRT-LLM's no-evict admission."""
    preempted = {"lifo": 0, "fifo": 0}
    rejected = reused = bursts = trtllm = 0
    for seed in range(0, 120):
        rng = random.Random(seed)
        stream = aggregated.random_stream(rng, 30)
        engine = aggregated.random_engine(rng, stream)
        out = aggregated.assert_same(seed, 30, mtp=True)
        preempted[engine.preemption_mode] += out["counters"][6]
        rejected += sum(1 for entry in out["terminals"] if entry[-1] == "rejected")
        reused += sum(1 for rec in out["records"] if rec[4])
        steps, tokens = out["counters"][8], out["counters"][9]
        bursts += tokens > steps
        trtllm += engine.backend == "trtllm" and tokens > steps
    assert min(*preempted.values(), rejected, reused, bursts, trtllm) > 0, (
        preempted, rejected, reused, bursts, trtllm)


@pytest.mark.parametrize("block", range(3))
def test_mtp_handoffs_match_the_python_roles(block):
    """(the decode ranks burst and preempt; the prefill copies never draw)"""
    bursts = preempted = 0
    for seed in range(block * 60, block * 60 + 60):
        out = roles.assert_same(seed, 30, mtp=True)
        prefill, decodes = out["state"][0], out["state"][1:]
        assert prefill[9] == prefill[8]      # decode_tokens == decode_steps: no burst
        bursts += sum(state[9] > state[8] for state in decodes)
        preempted += sum(state[6] for state in decodes)
    assert bursts and preempted


def test_the_c_generator_draws_as_stdrng():
    """One long request on the C rank: its bursts (tokens per pass) are MtpBursts.draw's on the
    Python generator (PyStdRng: ChaCha12 in Python), for rates that draw, refuse and accept
    without a draw, and a seed past 2^63 plus the scheduler index (wrapping)."""
    for rates, seed in (("0.85,0.3,0,0,0", 42), ("1,0.5,0,1,0.25", 7), ("0,1", 2**64 - 2)):
        engine = EngineConfig(block_size=16, num_gpu_blocks=4096, aic_nextn=5,
                              aic_nextn_accept_rates=rates, aic_mtp_seed=seed)
        rank = NativeVllmRank(engine, StepTimer(FixedTiming(10.0, 5.0)),
                              BlockPool(4096, backend="c"), callbacks=aggregated.Terminals(),
                              scheduler_id=3)
        request = SimRequest(1, Prompt.from_tokens([5] * 20), 3000, 0.0)
        rank.submit(request)
        while rank.has_work():
            rank.schedule(rank.pass_end_ms)
            rank.complete()
        per_pass = {}
        for first, last in request.stretches:
            for P in range(first, last + 1):
                per_pass[P] = per_pass.get(P, 0) + 1
        bursts = MtpBursts(engine, 3)
        bursts.rng = PyStdRng((seed + 3) % 2**64)
        bursts._next_u64 = bursts.rng.next_u64
        expected, left = [], 3000
        while left:
            burst = min(bursts.draw(), left)
            expected.append(burst)
            left -= burst
        assert [per_pass[P] for P in sorted(per_pass)] == expected, rates


def test_the_c_rank_takes_mtp():
    """aic_nextn runs on the C rank, aggregated (its own class, which the plain C loop leaves
    to the runtime), in attention-DP groups and in the disaggregated roles; what it does not
    implement still goes to the Python rank."""
    engine = EngineConfig(backend="vllm", aic_nextn=2)
    assert supports(engine, backend="c") is None
    assert supports(engine, dp_size=4, backend="c") is None
    assert supports(engine, role="decode", backend="c") is None
    assert supports(EngineConfig(backend="trtllm", aic_nextn=3), role="prefill",
                    backend="c") is None
    assert "prefill_schedule_interval" in supports(
        EngineConfig(aic_nextn=2, prefill_schedule_interval=2), dp_size=2, backend="c")
    rank = NativeVllmRank(engine, StepTimer(FixedTiming(10.0, 5.0)), BlockPool(64, backend="c"),
                          callbacks=aggregated.Terminals())
    assert type(rank) is NativeVllmMtpRank
    plain = NativeVllmRank(EngineConfig(), StepTimer(FixedTiming(10.0, 5.0)),
                           BlockPool(64, backend="c"), callbacks=aggregated.Terminals())
    assert type(plain) is NativeVllmRank


def test_the_mtp_set_up_checks_its_arguments():
    ffi, lib = native.ffi, native.lib
    pool = BlockPool(8, backend="c")
    config = ffi.new("aisim_vllm_config *", dict(block_size=4, num_blocks=8, max_batched=64,
                                                 max_seqs=4, max_model_len=-1, caching=1,
                                                 chunked=1, lifo=1))
    box = ffi.new("aisim_vllm_rank **")
    assert lib.aisim_vllm_new(box, config, pool._pool) == native.OK
    rank = ffi.gc(box[0], lib.aisim_vllm_free)
    limits, always = ffi.new("uint64_t[5]"), ffi.new("int32_t[5]")
    for nextn in (0, 6):
        assert lib.aisim_vllm_set_mtp(rank, nextn, limits, always, 42, 1) == native.EINVAL
    assert lib.aisim_vllm_set_mtp(rank, 2, ffi.NULL, always, 42, 1) == native.EINVAL
    assert lib.aisim_vllm_set_mtp(rank, 2, limits, always, 42, 1) == native.OK
    assert lib.aisim_vllm_set_mtp(rank, 2, limits, always, 42, 1) == native.EINVAL   # once


@pytest.mark.skipif(native.BACKEND != "c", reason="the Python backend keeps the Python rank")
def test_the_features_doc_example_runs_on_the_c_rank(monkeypatch):
    """FEATURES.md §1.2's 16/20 example through the runtime on the C rank: TTFT 15, TTST 0,
    last token 60 (seed 43: 55)."""
    built = []
    init = NativeVllmRank.__init__

    def counted(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(type(self))
    monkeypatch.setattr(NativeVllmRank, "__init__", counted)
    record = run_replay(json.dumps(_mtp_payload())).per_request[0]
    assert built == [NativeVllmMtpRank]
    assert (record["ttft_ms"], record["ttst_ms"], record["last_token_ms"]) == (15.0, 0.0, 60.0)
    assert run_replay(json.dumps(_mtp_payload(aic_mtp_seed=43))).per_request[0][
        "last_token_ms"] == 55.0


def test_mtp_decode_only_runs_take_several_passes_an_event():
    """The C rank's decode-only MTP runs (NativeVllmMtpRank.extend) happen on the random
    streams (more passes than events), cut by arrivals too (truncating), and give the Python
    rank's passes and records (assert_same checks both)."""
    extended = truncated = 0
    for seed in range(40):
        rng = random.Random(seed)
        stream = aggregated.random_stream(rng, 30)
        engine = aggregated.with_mtp(rng, aggregated.random_engine(rng, stream))
        for truncating in (False, True):
            out, _ = aggregated.drive(NativeVllmRank, engine, seed, stream, truncating)
            runs = len(out["pass_ends"]) > len(out["trace"])
            extended += runs
            truncated += runs and truncating
    assert extended and truncated

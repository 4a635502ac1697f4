"""The vLLM rank's admission policies (engine/vllm_admission.py) on real ranks and requests:
vLLM's (admit while blocks allocate, preempt LIFO or FIFO when growth does not fit) and
TensorRT-LLM's GUARANTEED_NO_EVICT (reserve the whole footprint, never preempt, clamp the output
to the pool, reuse a whole cached prompt)."""

from __future__ import annotations

import pytest

from aisimulate_core import native
from aisimulate_core.engine.request import PREEMPTED, RUNNING, SimRequest
from aisimulate_core.engine.timing import FixedTiming, StepTimer
from aisimulate_core.engine.vllm import VllmRank
from aisimulate_core.engine.vllm_admission import GuaranteedNoEvict, VllmAdmission
from aisimulate_core.engine.vllm_roles import VllmDecodeRank, VllmPrefillRank
from aisimulate_core.kv.block_pool import BlockPool
from aisimulate_core.spec.engine import EngineConfig
from aisimulate_core.workload.prompt import Prompt


class Terminals:
    """The runtime's callbacks: which request finished, as what."""

    def __init__(self):
        self.log = []

    def on_finish(self, r, end_ms, status):
        self.log.append((r.uuid, status))

    def on_source_held(self, r, end_ms):
        self.log.append((r.uuid, "held"))


def make_rank(backend, blocks, block_size=16, cls=VllmRank, **settings):
    engine = EngineConfig(backend=backend, block_size=block_size, num_gpu_blocks=blocks,
                          **settings)
    return cls(engine, StepTimer(FixedTiming(10.0, 5.0)), BlockPool(blocks, backend="python"),
               callbacks=Terminals())


def request(uuid, prompt_len, output, first_token=None):
    start = uuid * 1000 if first_token is None else first_token
    return SimRequest(uuid, Prompt.from_tokens(range(start, start + prompt_len)), output, 0.0)


def run_pass(rank):
    rank.schedule(rank.pass_end_ms)
    rank.complete()


def drain(rank):
    while rank.has_work():
        run_pass(rank)


@pytest.mark.parametrize("backend, policy", [("vllm", VllmAdmission), ("trtllm", GuaranteedNoEvict),
                                             ("sglang", VllmAdmission)])
def test_the_rank_picks_guaranteed_no_evict_exactly_for_trtllm(backend, policy):
    assert type(make_rank(backend, 8).admission) is policy
    for mode, lifo in (("lifo", True), ("fifo", False)):
        admission = make_rank("vllm", 8, preemption_mode=mode).admission
        assert admission.lifo is lifo
    if native.lib is not None:
        from aisimulate_core.engine.vllm_native import NativeVllmRank
        if backend != "sglang":
            rank = NativeVllmRank(EngineConfig(backend=backend, num_gpu_blocks=8),
                                  StepTimer(FixedTiming(10.0, 5.0)), BlockPool(8, backend="c"),
                                  callbacks=Terminals())
            assert type(rank.admission) is policy
            assert rank.no_evict is (backend == "trtllm")    # the C rank's config flag


def starved_decoders(backend, mode="lifo"):
    """Two decoders of 6-token prompts in blocks of 4 (the 8th token needs a third block), and
    every other block of the pool taken from under the rank: the next growth does not fit."""
    rank = make_rank(backend, 16, block_size=4, preemption_mode=mode)
    first, second = request(1, 6, 8), request(2, 6, 8)
    rank.submit(first)
    rank.submit(second)
    run_pass(rank)
    assert [r.status for r in (first, second)] == [RUNNING, RUNNING]
    thief = rank.pool.new_seq()
    rank.pool.allocate(thief, rank.pool.allocatable())
    for _ in range(3):
        run_pass(rank)
    return rank, first, second, thief


@pytest.mark.parametrize("mode, victim", [("lifo", 2), ("fifo", 1)])
def test_vllm_preempts_the_newest_or_oldest_on_growth_failure(mode, victim):
    rank, first, second, thief = starved_decoders("vllm", mode)
    assert rank.preemptions == 1
    preempted = first if victim == 1 else second
    survivor = second if victim == 1 else first
    assert preempted.status == PREEMPTED and preempted.preemptions == 1
    assert list(rank.waiting) == [preempted] and rank.running == [survivor]
    assert rank.request_blocks(survivor) == 3       # it grew into the victim's room
    rank.pool.release(thief)
    drain(rank)
    assert rank.cb.log == [(survivor.uuid, "completed"), (preempted.uuid, "completed")]
    assert rank.preemptions == 1


def test_trtllm_never_preempts_on_growth_failure():
    rank, first, second, thief = starved_decoders("trtllm")
    assert rank.preemptions == 0
    assert rank.running == [first, second] and not rank.waiting
    stuck = (first.generated, second.generated)
    run_pass(rank)
    assert (first.generated, second.generated) == stuck    # both wait for room
    rank.pool.release(thief)
    drain(rank)
    assert rank.cb.log == [(1, "completed"), (2, "completed")]
    assert rank.preemptions == 0 and first.preemptions == second.preemptions == 0
    assert rank.completion_total == rank.held_total == 0


def test_trtllm_rejects_a_prompt_its_reserved_footprint_cannot_hold():
    # 4 blocks of 16 tokens: a 64-token prompt fills the pool, leaving no room for its output
    trt, vllm = make_rank("trtllm", 4), make_rank("vllm", 4)
    assert trt.fit_error(request(1, 64, 4)) is not None
    assert vllm.fit_error(request(1, 64, 4)) is None
    assert trt.fit_error(request(1, 63, 4)) is None
    for rank in (trt, vllm):
        assert rank.fit_error(request(1, 65, 4)) is not None
        rank.submit(request(1, 64, 1))      # (one token: a vLLM rank never grows it)
        drain(rank)
    assert trt.cb.log == [(1, "rejected")]
    assert vllm.cb.log == [(1, "completed")]
    # a first admission whose footprint exceeds the pool (an output past the enqueue clamp)
    r = request(2, 16, 100)
    r.out_limit = 100
    assert trt.admission.rejects(trt, r, True)
    assert not trt.admission.rejects(trt, r, False)
    assert not vllm.admission.rejects(vllm, r, True)


def test_trtllm_clamps_the_output_to_the_pool():
    trt, vllm = make_rank("trtllm", 4), make_rank("vllm", 4)
    clamped, free = request(1, 40, 100), request(2, 40, 100)
    trt.submit(clamped)
    vllm.submit(free)
    assert (clamped.out_limit, free.out_limit) == (24, 100)


def test_trtllm_reserves_the_footprint_through_completion():
    # each request needs ceil((16 + 32) / 16) = 3 blocks to completion; 6 blocks hold two
    trt, vllm = make_rank("trtllm", 6), make_rank("vllm", 6)
    for rank in (trt, vllm):
        for uuid in (1, 2, 3):
            rank.submit(request(uuid, 16, 32))
        run_pass(rank)
    assert [r.uuid for r in trt.running] == [1, 2] and [r.uuid for r in trt.waiting] == [3]
    assert trt.completion_total == 6 and trt.held_total == 2
    assert [r.uuid for r in vllm.running] == [1, 2, 3] and vllm.completion_total == 0
    drain(trt)
    assert [uuid for uuid, _ in trt.cb.log] == [1, 2, 3] and trt.preemptions == 0
    assert trt.completion_total == 0


@pytest.mark.parametrize("backend, reused", [("vllm", 16), ("trtllm", 32)])
def test_a_cached_prompt_is_reused_whole_only_by_trtllm(backend, reused):
    rank = make_rank(backend, 16)
    rank.submit(request(1, 32, 2))
    drain(rank)
    again = request(2, 32, 2, first_token=1000)      # the same 32 tokens
    rank.submit(again)
    drain(rank)
    assert again.first_reused == reused


def test_a_trtllm_decode_destination_must_fit_its_footprint():
    trt = make_rank("trtllm", 4, cls=VllmDecodeRank)
    vllm = make_rank("vllm", 4, cls=VllmDecodeRank)
    assert not trt.accept(request(1, 64, 1))        # 64 + 1 tokens need 5 blocks
    assert vllm.accept(request(1, 64, 1))
    head = request(2, 16, 32)
    assert trt.accept(head)
    assert trt.retry() == (head, 16)
    assert head.footprint_blocks == 3 and trt.completion_total == 3
    # one block held, three reserved: a second footprint of three does not fit the last block
    assert trt.accept(request(3, 16, 32)) and trt.retry() is None


def test_a_trtllm_prefill_copy_frees_its_output_room_when_it_completes():
    rank = make_rank("trtllm", 4, cls=VllmPrefillRank)
    copy = request(1, 16, 1)
    rank.submit(copy)
    run_pass(rank)
    assert rank.cb.log == [(1, "held")]
    assert rank.completion_total == 0 and copy.footprint_blocks == 0
    assert rank.pool.active() == 1          # the source's KV stays held
    rank.release_source(copy)
    assert rank.pool.active() == 0 and rank.completion_total == 0


def test_a_vllm_decode_destination_cannot_evict_the_cached_blocks_it_reuses():
    """The room for a destination's fresh blocks is the allocatable blocks less the cached ones
    it reuses (they become its own, so they cannot also be evicted for the fresh ones)."""
    rank = make_rank("vllm", 5, cls=VllmDecodeRank)
    pool = rank.pool
    first = request(1, 32, 1)
    assert rank.accept(first) and rank.retry() == (first, 32)
    rank.activate(first)
    drain(rank)                                      # its two prompt blocks stay cached
    held = request(2, 16, 1)
    assert rank.accept(held) and rank.retry() == (held, 16)
    assert (pool.active(), pool.inactive(), pool.allocatable()) == (1, 2, 4)
    # the same 32 tokens, then 48 new ones: 2 cached blocks and 3 fresh, with 2 blocks free
    longer = SimRequest(3, Prompt.from_tokens([*range(1000, 1032), *range(5000, 5048)]), 1, 0.0)
    assert rank.accept(longer)
    assert rank.retry() is None                      # 3 fresh > 4 allocatable - 2 reused
    rank.activate(held)
    drain(rank)                                      # the held block is freed (cached)
    assert rank.retry() == (longer, 48)              # 3 fresh <= 5 - 2 reused
    # its 2 cached blocks reused, 2 free ones and the held request's cached block evicted
    assert (pool.active(), pool.inactive()) == (5, 0)

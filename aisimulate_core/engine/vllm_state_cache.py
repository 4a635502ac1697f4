"""``state_cache``: a per-request recurrent state charged to the G1 pool (FEATURES.md §7).

For hybrid models every running request holds, besides its KV blocks, ``state_blocks =
ceil(bytes_per_request / (block_size x kv_cache_bytes_per_token))`` working-state blocks from
the same pool. Whenever a request's computed tokens reach its whole known sequence on a block
boundary (the end of an aligned prompt, a decode step reaching a multiple of the block size),
its working state is *published* as the checkpoint of that prefix: the working blocks are
cached under keys derived from the sequence hash of the block ending there, costing nothing.
Before the state is next written, ``state_blocks`` fresh blocks are allocated to *preserve*
the published checkpoint (they may evict cached blocks) and the working copy becomes private
again; the preserved copy is released (cached, evictable) once the write is done, and discarded
when the next checkpoint is published, so a request keeps only its latest one. A finished
request's checkpoint stays cached. Prefix reuse needs a checkpoint: the longest ``L`` within the
ordinary vLLM bound whose ``L / block_size`` KV blocks are cached and whose prefix has a
checkpoint (not one published during the pass being formed); a restored request starts with
fresh working blocks holding ``L`` computed tokens.

``StateCacheRank`` is the vLLM rank with these rules (aggregated only), the twin and
specification of the C rank's (engine/vllm_native.py ``NativeVllmStateRank``, csrc/vllm_rank.c's
state_* functions; the C rank declines state_cache with MTP bursts, which stays here). It keeps
every request outside open stretches (each computed token is a state write) and runs on
``StatePool``, the Python block pool with the per-block operations the states need (the C
pool's aisim_kv_uncache, aisim_kv_discard and aisim_kv_key_refs).
"""

from __future__ import annotations

from ..kv.py_block_pool import CACHED, FREE, PRIVATE, PyBlockPool
from .mtp import stamp_tokens
from .request import FINISHED, request_name
from .vllm import VllmRank

_MASK = (1 << 64) - 1


def state_key(prefix, slot):
    """The cache key of slot ``slot`` of the checkpoint after the block hashed ``prefix``
    (splitmix64 of the pair: disjoint from the KV blocks' sequence hashes in practice)."""
    z = (prefix ^ ((slot + 1) * 0x9E3779B97F4A7C15)) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def state_blocks(engine):
    """The working-state blocks of a request: ceil(bytes_per_request / (block_size x
    kv_cache_bytes_per_token))."""
    return -(-engine.state_cache.bytes_per_request
             // (engine.block_size * engine.kv_cache_bytes_per_token))


def state_fit_error(rank, r, blocks):
    """Why ``r`` can never be admitted on ``rank`` whose requests hold ``blocks`` state blocks
    besides their KV (checked when an embedder submits it), or None."""
    need = -(-r.prompt_len // rank.block_size) + blocks
    if need <= rank.num_blocks:
        return None
    return (f"{rank.setting_prefix('num_gpu_blocks')}the prompt of request {request_name(r)} "
            f"({r.prompt_len} tokens) and its working state need {need} KV blocks of "
            f"{rank.block_size} tokens, a rank has {rank.num_blocks}")


class StatePool(PyBlockPool):
    """The Python block pool plus what checkpoints need: un-caching a sequence's blocks,
    discarding one released block still cached under a key, asking for a key."""

    def uncache(self, seq):
        """The blocks of ``seq`` (held by it alone) lose their cache identity."""
        state, block_hash = self._state, self._hash
        for block in self._tables[seq]:
            if state[block] == CACHED:
                self._forget_copy(block)
                block_hash[block] = 0
                state[block] = PRIVATE
                self._cached -= 1

    def discard(self, block, key):
        """Free ``block`` if it is still an unreferenced cached copy of ``key`` (it may have
        been evicted and reused since it was released)."""
        if (block < len(self._ref) and self._ref[block] == 0 and self._state[block] == CACHED
                and self._hash[block] == key):
            self._lru_unlink(block)
            self._forget_copy(block)
            self._hash[block] = 0
            self._state[block] = FREE
            self._cached -= 1
            self._free_stack.append(block)

    def has_key(self, key):
        return key in self._index

    def blocks_of(self, seq):
        return self._tables[seq]


class RequestState:
    """One request's working state and its latest checkpoint."""

    __slots__ = ("work", "computed", "published", "snap", "snap_seq", "snap_hash", "snap_step")

    def __init__(self, computed=0):
        self.work = -1           # pool sequence of the working blocks (none until the first write)
        self.computed = computed
        self.published = False   # the working blocks are the checkpoint at snap_hash
        self.snap = []           # (block, key) of the latest checkpoint's blocks
        self.snap_seq = -1       # pool sequence of a preserved (owned) checkpoint copy
        self.snap_hash = None
        self.snap_step = -1


class StateCache:
    """A rank's state bookkeeping over its ``StatePool``."""

    __slots__ = ("pool", "blocks", "block_size", "step", "published_now", "states")

    def __init__(self, pool, blocks, block_size):
        self.pool = pool
        self.blocks = blocks
        self.block_size = block_size
        self.step = 0
        self.published_now = set()   # prefixes published during the pass being formed
        self.states = {}             # request uuid -> RequestState

    def begin_step(self):
        self.published_now.clear()
        self.step += 1

    def keys(self, prefix):
        return [state_key(prefix, slot) for slot in range(self.blocks)]

    def has_checkpoint(self, prefix):
        if prefix in self.published_now:
            return False
        has_key = self.pool.has_key
        return all(has_key(key) for key in self.keys(prefix))

    def restorable(self, hashes, cached):
        """The longest prefix of at most ``cached`` tokens with a checkpoint."""
        bs = self.block_size
        while cached > 0 and not self.has_checkpoint(hashes[cached // bs - 1]):
            cached -= bs
        return cached

    def preserve_need(self, r, target):
        """Blocks of the copy preserving ``r``'s published checkpoint before a write."""
        st = self.states.get(r.uuid)
        if st is not None and st.work >= 0 and target > st.computed and st.published:
            return self.blocks
        return 0

    def write_need(self, r, target):
        """Blocks computing ``r`` up to ``target`` tokens takes beyond its KV: a working
        state it does not hold yet, or a copy preserving its published checkpoint."""
        st = self.states.get(r.uuid)
        if st is None or st.work < 0:
            return self.blocks
        return self.preserve_need(r, target)

    def source_need(self, hashes, cached):
        """Blocks a restore from the checkpoint at ``cached`` tokens takes out of the
        evictable ones: its cached state blocks no request holds (pinned while it is read)."""
        if not cached:
            return 0
        keys = self.keys(hashes[cached // self.block_size - 1])
        index, ref = self.pool._index, self.pool._ref
        return sum(1 for key in keys if ref[index[key]] == 0)

    def prepare(self, r, target, hashes=None):
        """Before computing ``r`` up to ``target``: its working blocks (a restored request's
        read from its checkpoint, pinned meanwhile: returns the pool sequence pinning them,
        to release once the pass's blocks are taken), and the preserved copy of a published
        checkpoint (the working copy turns private)."""
        st = self.states.get(r.uuid)
        if st is None:
            st = self.states[r.uuid] = RequestState()
        pool = self.pool
        if st.work < 0:
            pin = -1
            if st.computed:
                keys = self.keys(hashes[st.computed // self.block_size - 1])
                pin = pool.new_seq()
                pool.acquire(pin, keys, 0, self.blocks)
            st.work = pool.new_seq()
            pool.allocate(st.work, self.blocks)
            return pin
        elif target > st.computed and st.published:
            seq = st.snap_seq = pool.new_seq()
            pool.allocate(seq, self.blocks)
            keys = self.keys(st.snap_hash)
            pool.commit(seq, keys, 0, self.blocks)
            pool.uncache(st.work)
            st.published = False
            st.snap = list(zip(pool.blocks_of(seq), keys))
            st.snap_step = self.step
            self.published_now.add(st.snap_hash)
        return -1

    def commit(self, r, computed, checkpoint):
        """``r``'s state now covers ``computed`` tokens; ``checkpoint``: the prefix hash to
        publish it under (the computed tokens end the known sequence on a block boundary)."""
        st = self.states[r.uuid]
        if computed == st.computed or st.work < 0:
            return
        pool = self.pool
        if st.snap_seq >= 0:
            pool.release(st.snap_seq)
            st.snap_seq = -1
        st.computed = computed
        if checkpoint is None:
            return
        for block, key in st.snap:
            pool.discard(block, key)
        keys = self.keys(checkpoint)
        pool.commit(st.work, keys, 0, self.blocks)
        st.published = True
        st.snap = list(zip(pool.blocks_of(st.work), keys))
        st.snap_hash = checkpoint
        st.snap_step = self.step
        self.published_now.add(checkpoint)

    def release(self, r):
        """``r`` leaves (or is preempted): its blocks go back, its latest checkpoint stays
        cached."""
        st = self.states.pop(r.uuid, None)
        if st is None:
            return None
        pool = self.pool
        if st.snap_seq >= 0:
            pool.release(st.snap_seq)
        if st.work >= 0:
            pool.release(st.work)
        return st

    def preempt(self, r):
        """A preemption also discards a checkpoint the retracted pass published."""
        st = self.release(r)
        if st is not None and st.snap_step == self.step:
            for block, key in st.snap:
                self.pool.discard(block, key)


class StateCacheRank(VllmRank):
    """The vLLM rank of an aggregated worker with ``state_cache``."""

    stretchless = True
    stores_new_only = True
    _preempting = None

    def __init__(self, engine, timer, pool, **kwargs):
        super().__init__(engine, timer, pool, **kwargs)
        owner = getattr(pool, "_label", None)
        self.pool = StatePool(engine.num_gpu_blocks)
        if owner is not None:
            self.pool._label = owner
        self.state = StateCache(self.pool, state_blocks(engine), engine.block_size)

    def schedule(self, now_ms):
        if self.running or self.waiting:
            self.state.begin_step()
            # checkpoints published in the previous pass are restorable now: a queue head that
            # had to wait must be asked again
            self.kv_version += 1
        return super().schedule(now_ms)

    # the hooks VllmRank calls where the state cache changes its rules
    def _state_need(self, r, end):
        return self.state.write_need(r, end)

    def _never_fits(self, r, end):
        """Whether computing ``r`` to ``end`` tokens needs more than the whole pool: its KV,
        its working state and the copy preserving its checkpoint."""
        state = self.state
        return (-(-end // self.block_size) + state.blocks + state.preserve_need(r, end)
                > self.num_blocks)

    def fit_error(self, r):
        return state_fit_error(self, r, self.state.blocks)

    def _restorable(self, r, hashes, cached, active_cached):
        if cached and hashes is not None:
            cached = self.state.restorable(hashes, cached)
            if active_cached > cached:
                active_cached = cached
        return cached, active_cached

    def _restore_need(self, hashes, cached):
        return self.state.source_need(hashes, cached)

    def _admitted(self, r, cached):
        self.state.states[r.uuid] = RequestState(cached)

    def _run_chunk(self, r, tokens):
        end = r.computed + tokens
        pin = self.state.prepare(r, end, r.hash_cache)
        super()._run_chunk(r, tokens)
        if pin >= 0:
            self.pool.release(pin)
        # the end of the known sequence on a block boundary; with MTP any boundary (a prefill
        # chunk's too: state_random_3)
        aligned = end == r.prompt_len + r.generated or self.mtp is not None
        self.state.commit(r, end, self._checkpoint_at(r, end) if aligned else None)

    def _checkpoint_at(self, r, end):
        """The prefix hash a state computed to ``end`` tokens is published under, or None."""
        bs = self.block_size
        if not self.caching or end % bs:
            return None
        return self._lookup_hashes(r, end // bs)[end // bs - 1]

    def _burst_state(self, r, length, burst):
        """An MTP burst of ``burst`` tokens after ``length``: each draft token the verification
        computed is a state write (a checkpoint where it ends a block)."""
        for target in range(length + 1, length + burst):
            self.state.prepare(r, target)
            self.state.commit(r, target, self._checkpoint_at(r, target))

    def _release(self, r):
        # a request's state goes back before its KV (observed on preemption, where the order
        # decides which of its blocks are evicted first; taken for finishing requests too); a
        # preemption also discards a checkpoint the retracted pass published
        if r.seq >= 0:
            (self.state.preempt if self._preempting is r else self.state.release)(r)
        super()._release(r)

    def _preempt(self, r, P):
        self._preempting = r
        super()._preempt(r, P)
        self._preempting = None

    def _reject_running(self, r):
        """A running request whose next step can never fit the pool is rejected."""
        self.partial.remove(r)
        self.running.remove(r)
        self._release(r)
        r.status = FINISHED
        self._rejected.append(r)

    def _stamp(self, P, end_ms, ready):
        stamp_tokens(self, P, end_ms, ready,
                     [(r, 1) for r in ready if r.generated < r.out_limit])


__all__ = ["StateCacheRank", "StatePool", "state_blocks", "state_fit_error", "state_key"]

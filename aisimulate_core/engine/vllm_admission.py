"""How a vLLM-style rank admits requests and makes room for their growth (SEMANTICS 2.3, 2.6).

The rank (engine/vllm.py) picks one policy at construction (``admission_policy``) and asks it
wherever vLLM's scheduler and TensorRT-LLM's GUARANTEED_NO_EVICT capacity scheduler differ:

- ``limit_output``: the output limit a request takes on entering the rank;
- ``never_fits``: whether a prompt can never be admitted (the submission check);
- ``rejects``: whether admission rejects the head of the queue outright;
- ``admit``: whether the head fits now, how much of its cached prefix it reuses and how many
  blocks it reserves through completion;
- ``victim``: which running request gives way when growth does not fit, if any;
- ``destination_blocks`` / ``reserve_destination``: the same questions for a disaggregated
  decode destination (engine/vllm_roles.py).

The blocks a request reserves beyond what it holds (``footprint_blocks``, summed in the rank's
``completion_total``) are 0 under vLLM, which reserves nothing ahead. The C rank
(csrc/vllm_rank.c) takes the same rules from its ``no_evict`` flag.
"""

from __future__ import annotations

from .mtp import mtp_prefix_hit


class AdmissionPolicy:
    """The decisions above; ``rank`` is the VllmRank (or its C twin) asking, ``r`` a request."""

    __slots__ = ()

    def limit_output(self, rank, request):
        """Clamp ``request.out_limit`` further than max_model_len does (vLLM: no further)."""


class VllmAdmission(AdmissionPolicy):
    """vLLM's: admit while the request's blocks allocate, take blocks as it grows, and preempt
    (the newest or the oldest running request, LIFO or FIFO) when growth does not fit; a
    preempted request recomputes."""

    __slots__ = ("lifo",)

    def __init__(self, engine):
        self.lifo = engine.preemption_mode != "fifo"

    def never_fits(self, rank, r):
        return -(-r.prompt_len // rank.block_size) > rank.num_blocks

    def rejects(self, rank, r, fresh):
        """A first admission whose known tokens (and working state, state_cache) need more
        blocks than the rank has."""
        if not fresh:
            return False
        state = rank.state
        blocks = -(-(r.prompt_len + r.generated) // rank.block_size)
        return blocks + (state.blocks if state is not None else 0) > rank.num_blocks

    def admit(self, rank, r, length, cached, active_cached, hashes):
        """``(cached tokens reused, 0)`` when the blocks of the ``length`` known tokens (and
        working state), less the cached ones active already, fit the blocks no running request
        references, else None. The last block is recomputed to get logits while there is
        output left to sample."""
        bs = rank.block_size
        if r.generated < r.max_output:
            cap = ((length - 1) // bs) * bs
            if cached > cap:
                cached = cap
            if active_cached > cap:
                active_cached = cap
            if rank.mtp is not None:
                cached, active_cached = mtp_prefix_hit(cached, active_cached, bs)
        needed = -(-length // bs)
        state = rank.state
        if state is not None:
            cached, active_cached = rank._restorable(r, hashes, cached, active_cached)
            if state.blocks:
                needed += state.blocks + rank._restore_need(hashes, cached)
        if needed - active_cached // bs > rank.num_blocks - rank.pool.active():
            return None
        return cached, 0

    def victim(self, candidates):
        if not candidates:
            return None
        return candidates[-1] if self.lifo else candidates[0]

    def destination_blocks(self, rank, r):
        return -(-r.prompt_len // rank.block_size)

    def reserve_destination(self, rank, r, blocks):
        """``(hashes, cached blocks, 0)`` when the prompt's ``blocks`` fit, cached ones reused
        (evicting for the fresh blocks may not take a hit), else None."""
        pool = rank.pool
        room = pool.allocatable()
        hashes = None
        hits = 0
        if rank.caching:
            hashes = rank._lookup_hashes(r, r.prompt_len // rank.block_size)
            hits, active_hits = pool.match_counts(hashes)
            room -= hits - active_hits
        if blocks - hits > room:
            return None
        return hashes, hits, 0


class GuaranteedNoEvict(AdmissionPolicy):
    """TensorRT-LLM's GUARANTEED_NO_EVICT: admission reserves a request's whole prompt + output
    footprint through completion, so growth always fits and nothing is ever preempted; the
    output is clamped to the pool, and a whole cached prompt is reused."""

    __slots__ = ()

    @staticmethod
    def footprint(rank, r):
        """The blocks ``r`` reserves through completion."""
        return -(-(r.prompt_len + r.out_limit) // rank.block_size)

    @staticmethod
    def unreserved(rank):
        """Blocks neither referenced nor reserved for a running request's growth."""
        return (rank.num_blocks - rank.pool.active()
                - (rank.completion_total - rank.held_total))

    def limit_output(self, rank, request):
        """Enqueue normalization: prompt + output may reserve at most the whole pool."""
        capacity = rank.num_blocks * rank.block_size
        request.out_limit = min(request.out_limit, max(capacity - request.prompt_len, 0))

    def never_fits(self, rank, r):
        return r.prompt_len >= rank.num_blocks * rank.block_size

    def rejects(self, rank, r, fresh):
        """A first admission whose footprint exceeds the pool, or a prompt that fills it."""
        if fresh and self.footprint(rank, r) > rank.num_blocks:
            return True
        return self.never_fits(rank, r)

    def admit(self, rank, r, length, cached, active_cached, hashes):
        """``(cached tokens reused, footprint)`` when the footprint, less the cached blocks
        active already, fits the unreserved blocks, else None. Every cached block is reused
        (no last block recomputed)."""
        if rank.state is not None:      # (state_cache takes backend vllm only)
            cached, active_cached = rank._restorable(r, hashes, cached, active_cached)
        footprint = self.footprint(rank, r)
        if footprint - active_cached // rank.block_size > self.unreserved(rank):
            return None
        return cached, footprint

    def victim(self, candidates):
        return None     # the reservation covers all growth: TRT-LLM declines to preempt

    def destination_blocks(self, rank, r):
        """The whole footprint (the output clamped to the pool, as at enqueue)."""
        tokens = r.prompt_len
        capacity = rank.num_blocks * rank.block_size
        tokens += r.max_output if tokens >= capacity else min(r.max_output, capacity - tokens)
        return -(-tokens // rank.block_size)

    def reserve_destination(self, rank, r, blocks):
        """``(None, 0, footprint)`` when the footprint fits the unreserved blocks and the prompt
        fresh blocks (no cached ones taken), else None."""
        footprint = self.footprint(rank, r)
        if footprint > self.unreserved(rank) or blocks > rank.pool.allocatable():
            return None
        return None, 0, footprint


def admission_policy(engine):
    """The policy of a rank of ``engine``: GuaranteedNoEvict for backend "trtllm"."""
    return GuaranteedNoEvict() if engine.backend == "trtllm" else VllmAdmission(engine)


__all__ = ["AdmissionPolicy", "GuaranteedNoEvict", "VllmAdmission", "admission_policy"]

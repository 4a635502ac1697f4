"""The vLLM / TensorRT-LLM rank in the roles of a disaggregated deployment (SEMANTICS 3.3).

The handoff is source-first: the prefill side computes the prompt, then the decode side reserves
room for it, the KV moves, and the decode side takes over.

Prefill role: every request is a hidden copy limited to one output token, scheduled exactly as in
an aggregated rank but never charged decode time. When the copy completes it leaves the batch
(its ``max_num_seqs`` slot frees) while its KV stays *held*: referenced, counted active and
visible to prefix lookups, until the runtime releases the source.

Decode role: a destination is accepted into a pending FIFO; ``retry`` reserves the prompt's blocks
for the head (at most one per call, strictly in order) and a head that did not fit is tried
again only once the rank's capacity generation moved (a completion, preemption or drop). The
runtime calls ``retry`` on accept at an idle rank, at every pass completion and after every
activation. ``activate`` materializes the transferred prompt: the request joins the queue in
accept order and starts with zero tokens to compute; its first token is a decode step. Prompt
work on a decode rank (recompute after a preemption) costs no time.

These classes are the twins and specification of the C rank's roles (engine/vllm_native_roles.py,
csrc/vllm_rank.c), which the runtime builds wherever ``vllm_native.supports`` takes the role.
"""

from __future__ import annotations

from collections import deque

from .request import FINISHED, RUNNING, WAITING
from .vllm import VllmRank


class VllmPrefillRank(VllmRank):
    charges_decode = False
    holds_sources = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.held_sources = 0

    def _retire(self, r, end_ms):
        # the copy keeps its KV: no longer counted as running work of the rank, but the
        # blocks stay referenced until release_source
        self.running.remove(r)
        r.status = FINISHED
        self.held_total -= r.held_blocks
        r.held_blocks = 0
        if r.footprint_blocks:
            # the room it reserved for its output (TRT-LLM's) frees: a waiting head may fit now
            self.completion_total -= r.footprint_blocks
            r.footprint_blocks = 0
            self.kv_version += 1
        self.held_sources += 1
        self.cb.on_source_held(r, end_ms)

    def holds_kv(self):
        return self.held_sources > 0

    def submission_gauges(self):
        # a copy the pass in flight completes leaves the batch but keeps its KV held (the
        # source), so only the running count drops
        active, inactive, running, waiting = self.live_gauges()
        if self.in_flight:
            running -= len(self._finishing_in_flight())
        return active, inactive, running, waiting

    def release_source(self, r):
        """Free the KV of a held copy: the decode side has it, or the handoff failed."""
        self._release(r)
        self.held_sources -= 1
        if self.capture_gauges:
            self._gauges = self.live_gauges()


class VllmDecodeRank(VllmRank):
    charges_prefill = False
    # a pass that gives activations their first token may start a decode-only run (extend)
    open_activations = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending = deque()      # accepted destinations waiting for their reservation
        self.holds = 0              # reserved destinations waiting for their KV
        self.generation = 0         # capacity generation: gates retries of a failed head
        self._accepted = 0
        self.activation_runs = 0    # extended passes that began with activations' first tokens

    def accept(self, r):
        """Take destination ``r`` (a copy with the full output); False when it can never fit
        this rank (the handoff fails)."""
        self._limit_output(r)
        if not self._destination_fits(r):
            return False
        r.waiting_order = self._accepted
        self._accepted += 1
        self.pending.append(r)
        if self.capture_gauges:
            self._gauges = self.submission_gauges()
        return True

    def _destination_fits(self, r):
        """Whether destination ``r`` can ever fit this rank (the C rank's check too)."""
        return self.admission.destination_blocks(self, r) <= self.num_blocks

    def retry(self):
        """Reserve the prompt blocks of the pending head if it fits; returns ``(request,
        tokens to transfer when only missing blocks move)`` or None."""
        pending = self.pending
        if not pending:
            return None
        head = pending[0]
        generation = self.generation
        if head.last_attempt == generation or len(self.running) >= self.max_seqs:
            head.last_attempt = generation
            return None
        head.last_attempt = generation
        bs = self.block_size
        blocks = -(-head.prompt_len // bs)
        taken = self.admission.reserve_destination(self, head, blocks)
        if taken is None:
            return None
        hashes, hits, footprint = taken
        fresh = blocks - hits
        pending.popleft()
        self._take_blocks(head, hashes, hits, fresh, footprint)
        self.holds += 1
        self.kv_version += 1
        if self.capture_gauges:
            self._gauges = self.live_gauges()
        return head, fresh * bs

    def holds_kv(self):
        return self.holds > 0 or bool(self.pending)

    def live_gauges(self):
        # a destination waiting for its reservation or its KV counts as waiting, as the
        # reference shows
        pool = self.pool
        return (pool.active(), pool.inactive(), len(self.running),
                len(self.waiting) + self.holds + len(self.pending))

    def activate(self, r):
        """The prompt's KV has arrived: ``r`` waits to start, ahead of the first waiting request
        accepted after it."""
        self.holds -= 1
        if self.caching:
            self._commit_full_blocks(r, r.prompt_len // self.block_size)
        r.computed = r.prompt_len
        r.status = WAITING
        self._join_waiting(r)
        if self.capture_gauges:
            self._gauges = self.live_gauges()

    def _join_waiting(self, r):
        waiting = self.waiting
        order = r.waiting_order
        # preempted requests went to the front: the queue need not be in accept order
        for i, q in enumerate(waiting):
            if q.waiting_order > order:
                waiting.insert(i, r)
                return
        waiting.append(r)

    def _admit_waiting(self, now_ms, budget):
        waiting = self.waiting
        running = self.running
        before = len(running)
        if self.pending:
            # while a destination waits for room, only activated requests may start
            for r in [r for r in waiting if r.seq >= 0]:
                if len(running) >= self.max_seqs:
                    break
                if self._admit_activated(r, now_ms) and budget == 0:
                    break
            return len(running) - before
        while waiting and len(running) < self.max_seqs:
            r = waiting[0]
            if r.seq >= 0:
                if self._admit_activated(r, now_ms) and budget == 0:
                    break
            else:
                budget = self._admit_head(now_ms, budget)
                if budget is None:
                    break
        return len(running) - before

    def _admit_activated(self, r, now_ms):
        """Start an activated request: no lookup, no capacity check, zero tokens to compute.
        Returns False when max_model_len rejects it instead."""
        waiting = self.waiting
        if waiting[0] is r:
            waiting.popleft()
        else:
            waiting.remove(r)
        if self.max_model_len is not None and r.prompt_len >= self.max_model_len:
            self._release(r)
            r.status = FINISHED
            self._rejected.append(r)
            return False
        r.status = RUNNING
        r.pass_chunk = (0, -1, -1)
        self.running.append(r)
        self.partial.append(r)
        r.admissions.append((now_ms, 0, False))
        if r.first_reused is None:
            r.first_reused = 0
        return True

    def _release(self, r):
        super()._release(r)
        self.generation += 1

    def stall_reason(self, r):
        tokens = r.prompt_len + r.generated
        needed = -(-tokens // self.block_size)
        if needed > self.num_blocks or (not self.chunked and tokens > self.max_batched):
            return VllmRank.stall_reason(self, r)   # (the C decode rank shares this one)
        return (f"its {tokens} tokens need {needed} KV blocks of "
                f"{self.block_size} tokens, {self.num_blocks - self.pool.active()} of "
                f"{self.num_blocks} are free and nothing left to run frees more")

    def extend(self, horizon_ms, cutoff_ms, max_passes=4096):
        pending = self.pending
        if (pending and pending[0].last_attempt != self.generation
                and len(self.running) < self.max_seqs):
            return self.pass_end_ms  # the next pass end may reserve the head
        # (a router or forward-pass metrics hear of the first tokens at that pass end)
        if (self.open_activations and self._plain_after_ready and self._ready
                and self.observer is None and not self.fpm_on
                and self.pass_end_ms < horizon_ms and self._activations_decode_next()):
            self._open_activated()
            ends = super().extend(horizon_ms, cutoff_ms, max_passes)
            if self._macro_ends is not None:
                self.activation_runs += 1
            return ends
        return super().extend(horizon_ms, cutoff_ms, max_passes)

    def _activations_decode_next(self):
        """Whether the pass just formed is one whose only requests outside a stretch are
        activations taking their first token with it (a decode step, not the last token), and
        the next pass would only decode: it leaves nothing that the next pass could start,
        and the batch, one larger per activation, fits the token budget. Then opening their
        stretches now, not at the pass end, changes nothing: that pass end would run no
        retry that can succeed (no release) and the next pass is decode-only."""
        ready = self._ready
        for r in ready:
            if r.generated or r.pass_chunk[1] >= 0 or r.out_limit < 2:
                return False
        if self.n_dec + len(ready) > self.max_batched:
            return False
        waiting = self.waiting
        if not waiting or len(self.running) >= self.max_seqs:
            return True
        # while a destination waits, only an activated request could start
        return bool(self.pending) and all(r.seq < 0 for r in waiting)

    def _open_activated(self):
        """Open the stretches ``complete`` would open at this pass end (as VllmRank.complete,
        in ready order)."""
        P = self.pass_index
        for r in self._ready:
            self._open_stretch(r, P)
        self._ready = []
        self.partial.clear()
        self._plain_decode = True


ROLE_RANKS = {"prefill": VllmPrefillRank, "decode": VllmDecodeRank}

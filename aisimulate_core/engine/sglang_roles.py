"""The SGLang rank in the roles of a disaggregated deployment: the destination-first handoff
(FEATURES.md §8; the runtime's side is runtime/sglang_handoff.py).

Decode role: a request is accepted here first, into a FIFO of pending destinations. ``retry``
tries the head only (at most one per call) and only once per capacity generation (a
completion, a retraction or an activation that freed pages moves it): it matches the whole
prompt's pages on the radix tree, locks that path and allocates the rest of the page-rounded
prompt (the tree's evictable pages count as room); the tokens it allocated are what a
``destination_missing`` transfer moves. ``activate`` puts the transferred prompt on the tree
(its copies of pages another request put there meanwhile are freed) and queues the request as
prebuilt; each pass starts by moving prebuilt requests into the running batch (reuse 0, while
slots remain). While a prebuilt request still waits for a slot, or a destination for its
reservation, the waiting queue (retracted requests) forms no prefill batch. Prefill forwards
here cost no time.

Prefill role: every request is a hidden copy limited to one output token. When it completes,
its KV stays where it is (locked, its prompt not yet on the tree) until the runtime releases the
source, which then caches it as a finished request would.

Between two passes (a reservation, an activation, a release) the tree is stamped after the
last pass's completions and before the next pass's matches.
"""

from __future__ import annotations

import itertools
from array import array
from collections import deque

from .decode_run import MAX_PASSES
from .request import RUNNING, WAITING
from .sglang import SglangRank
from .sglang_kv import stamp
from .sglang_tokens import ensure_tokens


def _share_tokens(r, other):
    """Give role copy ``r`` the token array of its other copy ``other`` (or a new one): both
    copies have the same prompt and the same outputs (authored, or tagged by their common
    uuid), and an array only ever grows by those, so one array serves both; the radix trees
    keep edges into it, never a buffer of it."""
    if r.hash_cache is not None:
        return
    tokens = other.hash_cache if other is not None else None
    if tokens is None:
        tokens = _prompt_tokens(r.prompt)
        if other is not None:
            other.hash_cache = tokens
    r.hash_cache = tokens


def _prompt_tokens(prompt):
    """The prompt's token array (ensure_tokens' first build): runs of one length but a shorter
    last one, as a trace's hash ids give, are spread by one strided copy per run position."""
    values = prompt.values
    n = len(values)
    length = prompt.length
    if n == length:
        return array("I", values)
    lengths = prompt.lengths
    block = lengths[0]
    same = lengths.count(block)
    if n <= block or not (same == n or (same == n - 1 and lengths[-1] < block)):
        return ensure_tokens(_Tokens(prompt), 0)
    tokens = array("I", values) * block      # (the room; every element is written below)
    for k in range(block):
        tokens[k::block] = values
    del tokens[length:]
    return tokens


class _Tokens:
    """A prompt's bare holder for ensure_tokens' build."""

    __slots__ = ("prompt", "hash_cache")

    def __init__(self, prompt):
        self.prompt = prompt
        self.hash_cache = None


class _BetweenPasses:
    """Tree stamps of what happens while the rank has no pass in flight."""

    _k3 = 0
    # (the disaggregated loop asks whether a parked rank computes something at every drive:
    # an SGLang pass that changed nothing does nothing the next time either)
    partial = ()

    def _between_stamp(self):
        self._k3 += 1
        return stamp(self.pass_index - 1, 3, self._k3)


class SglangPrefillRank(_BetweenPasses, SglangRank):
    holds_sources = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.held_sources = 0
        self._held = set()          # the completed copies whose KV is held (from the pass
                                    # that completes them on)

    def submit(self, r):
        if self.caching:
            handoff = r.handoff
            _share_tokens(r, handoff.decode if handoff is not None else None)
        super().submit(r)

    def _finish_kv(self, r, access=None):
        if access is None:
            # a completed copy holds its KV: the source (release_source frees it)
            self._held.add(r)
            return
        super()._finish_kv(r, access)

    def _report_done(self, r, end_ms, status):
        if status == "completed":
            self.held_sources += 1
            self.cb.on_source_held(r, end_ms)
        else:
            self.cb.on_finish(r, end_ms, status)

    def holds_kv(self):
        return self.held_sources > 0

    def off_queue_tokens(self):
        """KV tokens requests in neither queue own off the tree: the held sources' (the
        invariant checker adds them)."""
        return sum(r.held_blocks - r.committed_blocks for r in self._held)

    def _stalled(self):
        if self.held_sources:
            return       # a held source's release frees KV later: nothing is stuck yet
        super()._stalled()

    def release_source(self, r):
        """The decode side has the KV (or the handoff failed): cache the prompt, unlock it."""
        self.held_sources -= 1
        self._held.discard(r)
        SglangRank._finish_kv(self, r, self._between_stamp())
        if self.capture_gauges:
            self._gauges = self.live_gauges()


class SglangDecodeRank(_BetweenPasses, SglangRank):
    charges_prefill = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending = deque()      # accepted destinations waiting for their reservation
        self.prebuilt = deque()     # activated requests waiting for a running slot
        self.holds = 0              # reserved destinations waiting for their KV
        self._reserved = set()      # ... those destinations
        self.generation = 0         # capacity generation: gates retries of a refused head
        self._idle_pass = False     # the pass just formed took no time and changed nothing

    def has_work(self):
        return bool(self.running or self.waiting or self.rounds_left or self.prebuilt)

    def holds_kv(self):
        return self.holds > 0 or bool(self.pending) or bool(self.prebuilt)

    def off_queue_tokens(self):
        """KV tokens requests in neither queue own off the tree: reserved destinations' and
        prebuilt ones' (the invariant checker adds them)."""
        return sum(r.held_blocks - r.committed_blocks
                   for r in itertools.chain(self._reserved, self.prebuilt))

    def live_gauges(self):
        # destinations waiting for their reservation, their KV or a running slot count as
        # waiting, as the reference's metrics show
        active, inactive, running, waiting = super().live_gauges()
        return active, inactive, running, waiting + len(self.pending) + self.holds + len(
            self.prebuilt)

    def _refresh_gauges(self):
        if self.capture_gauges:
            self._gauges = self.live_gauges()

    # ------------------------------------------------------------------ the destination
    def accept(self, r):
        """Take destination ``r`` (the full output) into the pending FIFO; False when this rank
        refuses it (a prompt not shorter than ``max_model_len``, or whose page-rounded
        footprint exceeds the pool): the request fails."""
        self._take_request(r)
        if self._refuses(r):
            return False
        if self.caching and r.prompt_len:
            handoff = r.handoff
            _share_tokens(r, handoff.prefill if handoff is not None else None)
        self.pending.append(r)
        self._refresh_gauges()
        return True

    def _refuses(self, r):
        """Whether destination ``r`` can never fit this rank (the C role's check too)."""
        limit = self.max_model_len
        if limit is not None and r.prompt_len >= limit:
            return True
        ps = self.page_size
        return -(-r.prompt_len // ps) * ps > self.total_kv_tokens

    def cancel(self, r):
        """Drop the reservation of ``r``, whose prefill failed before its KV came."""
        self.holds -= 1
        self._reserved.discard(r)
        cache = self.cache
        cache.free(r.held_blocks - r.committed_blocks)
        if r.seq is not None and r.seq is not cache.root:
            cache.unlock(r.seq)
        r.seq = None
        r.held_blocks = r.committed_blocks = 0
        self.generation += 1
        self._refresh_gauges()

    def retry(self):
        """Reserve the pending head if it is due and fits; returns ``(request, tokens the
        reservation allocated)`` or None. At the end of a zero-time pass that changed nothing
        (nobody runs; the queue is refused or shut) and reserves nothing either, the reference
        runs the same pass again at once for as long as it moves the admission ratio: the
        ratio goes to its floor."""
        got = self._reserve_head()
        if self._idle_pass:
            self._idle_pass = False
            if got is None:
                ratio = self.ratio
                for _ in range(1024):     # (the reference's same-time retry limit)
                    if ratio.settled():
                        break
                    ratio.decay()
        return got

    def _reserve_head(self):
        pending = self.pending
        if not pending:
            return None
        head = pending[0]
        generation = self.generation
        if head.last_attempt == generation:
            return None
        head.last_attempt = generation
        cache = self.cache
        ps = self.page_size
        prompt = head.prompt_len
        if self.caching and prompt:
            prefix, node = cache.match_and_lock(ensure_tokens(head, prompt), prompt,
                                                self._between_stamp())
        else:
            prefix, node = 0, cache.root
        allocated = -(-prompt // ps) * ps
        fresh = allocated - prefix
        free = cache.available()
        if fresh > free + cache.evictable_size:
            if node is not cache.root:
                cache.unlock(node)
            return None
        if fresh > free:
            cache.evict(fresh - free)
        if not cache.allocate(fresh):
            if node is not cache.root:
                cache.unlock(node)
            return None
        pending.popleft()
        head.seq = node
        head.committed_blocks = prefix
        head.held_blocks = allocated
        head.computed = 0
        self.holds += 1
        self._reserved.add(head)
        self._refresh_gauges()
        return head, fresh

    def activate(self, r):
        """The prompt's KV has arrived: on the tree, and prebuilt for the next pass."""
        self.holds -= 1
        self._reserved.discard(r)
        cache = self.cache
        before = cache.available()
        if self.caching:
            aligned = r.prompt_len - r.prompt_len % self.page_size
            if aligned > r.committed_blocks:
                self._insert_own(r, aligned, self._between_stamp())
        if cache.available() > before:
            self.generation += 1     # its copies of pages already on the tree were freed
        r.computed = r.prompt_len
        r.status = WAITING
        self.prebuilt.append(r)
        self._refresh_gauges()

    # ------------------------------------------------------------------ passes
    def schedule(self, now_ms):
        promoted = bool(self.prebuilt) and self._promote(now_ms)
        end = super().schedule(now_ms)
        if end is None and self._done:
            # only activations with nothing to generate: a zero-time pass completes them
            for r in self._finishing:
                self._finish_kv(r)
            self._finishing = []
            self.pass_effect = True
            self.pass_end_ms = end = now_ms
        self._idle_pass = end == now_ms and not self.pass_effect and not promoted
        return end

    def _promote(self, now_ms):
        prebuilt = self.prebuilt
        running = self.running
        promoted = False
        while prebuilt and len(running) < self.max_running:
            r = prebuilt.popleft()
            r.status = RUNNING
            r.admissions.append((now_ms, 0, bool(r.admissions)))
            if r.first_reused is None:
                r.first_reused = 0
            promoted = True
            if r.generated >= r.out_limit:
                r.open_start = None
                self._complete(r)         # nothing to generate: done with this pass, no token
                continue
            self._join_seq += 1
            running.join(r, self._join_seq)
        return promoted

    def _may_prefill(self):
        return not self.prebuilt and not self.pending

    # ------------------------------------------------------------------ decode-only runs
    def extend(self, horizon_ms, cutoff_ms, max_passes=MAX_PASSES):
        """SglangRank.extend, kept to one pass when its end is one the handoff needs: a
        pending head not yet tried in this capacity generation (its retry there may reserve
        it), or a prebuilt request with a slot free (the next pass start promotes it). Within
        a run nothing moves the generation before its last pass (no completion, retraction or
        activation: the runtime cuts the run at an activation's or a cancellation's pass end,
        at an accept, and at the pass in flight when a transfer into this rank completes)."""
        pending = self.pending
        if pending and pending[0].last_attempt != self.generation:
            return self.pass_end_ms
        if self.prebuilt and len(self.running) < self.max_running:
            return self.pass_end_ms
        return super().extend(horizon_ms, cutoff_ms, max_passes)

    def _head_cost(self):
        # a queue shut by a waiting destination admits nothing while the run lasts (the
        # destination stays pending and the prebuilt ones wait for a slot until it ends)
        return super()._head_cost() if self._may_prefill() else None

    def _eviction_unseen(self):
        # ... so no pass of the run prices the queue's head either
        return not self._may_prefill() or super()._eviction_unseen()

    def _stalled(self):
        if self.holds or self.pending or self.prebuilt:
            return       # reserved destinations arrive later: nothing is stuck yet
        super()._stalled()

    def _complete(self, r):
        super()._complete(r)
        self.generation += 1

    def _retract(self, r):
        super()._retract(r)
        self.generation += 1


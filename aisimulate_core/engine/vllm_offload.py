"""The vLLM rank with KV offload tiers behind its GPU cache (FEATURES.md §5, §6).

``VllmOffloadRank`` is ``VllmRank`` with vLLM's ``OffloadingConnector`` as the reference
models it: the G2 host tier (``native_host_offload``) and, behind it, the G3 storage tier
(``g3_offload``, engine/offload_g3.py). The tiers' block pools are kv/offload_tier.py (C or
Python); this module is the policy around them:

* stores (D2H): after each pass's scheduling, every scheduled request's complete prompt
  blocks beyond its store cursor form one cohort; the blocks missing from the host take free
  slots or evict the oldest unpinned resident entries (none of the cohort's), or the cohort
  waits for a later pass; a request whose allocation in the pass took a G1 block another
  D2H still reads stores nothing in that pass. Cohorts are submitted at the pass end on a
  FIFO lane; a request that finishes while its store runs keeps the engine stepping to its end;
* lookups (H2D): a waiting request (fresh or preempted) is probed on the host after its G1
  prefix; a pending block (or one being loaded, or its own store in flight) makes it wait in
  a queue of its own ahead of the ordinary one (vLLM's skipped_waiting); a hit reserves G1
  blocks (when the whole request fits and a seat is free: the loads started in the pass take
  seats from later hits, not from requests admitted without a load) and queues a load on a FIFO lane that starts once the reserved blocks' previous D2H
  is done; the request is admitted at the first pass that starts after the load (the next
  one even for an instantaneous load), with the loaded blocks counted as cached;
* the host keys are the reference's XXH3 sequence hashes (kv/ref_hashes.py): a completed
  transfer's blocks join the LRU in their ascending order;
* compute fence: a pass whose allocations took GPU blocks with a D2H in flight computes from
  that D2H's end;
* reuse split: the first admission's reuse as G1 tokens and host tokens
  (``tier_split``, read by runtime/records.py).

The rank runs decode-only extensions only while no transfer is in flight, nothing waits and
every running prompt is stored (``extend``); a worker with nothing to run but transfers in
flight waits for the next transfer's end with an empty pass that an arrival cuts short.
"""

from __future__ import annotations

import heapq

from ..kv.offload_tier import ABSENT, PENDING, offload_tier
from ..kv.ref_hashes import ref_seq_hashes
from .decode_run import MAX_PASSES
from .request import RUNNING
from .vllm import VllmRank

_D2H, _H2D = 0, 1
_NO_STORE = (0.0, 0.0, ())


class _TrackedPool:
    """The rank's G1 pool, noting the blocks each allocation hands out fresh (not prefix hits):
    the compute fence and the H2D start read which of them a D2H still reads."""

    def __init__(self, pool):
        self._pool = pool
        self.fresh = []
        self.track = False          # only while some D2H is in flight

    def __getattr__(self, name):
        return getattr(self._pool, name)

    def allocate(self, seq, k):
        pool = self._pool
        if not self.track:
            return pool.allocate(seq, k)
        before = pool.seq_len(seq)
        ok = pool.allocate(seq, k)
        if ok and k:
            self.fresh.extend(pool.seq_blocks(seq, before))
        return ok

    def acquire_allocate(self, seq, hashes, start, n, k):
        pool = self._pool
        if not self.track:
            return pool.acquire_allocate(seq, hashes, start, n, k)
        before = pool.seq_len(seq) + n
        ok = pool.acquire_allocate(seq, hashes, start, n, k)
        if ok and k:
            self.fresh.extend(pool.seq_blocks(seq, before))
        return ok

    def allocate_each(self, seqs, k_each=1):
        pool = self._pool
        if not self.track:
            return pool.allocate_each(seqs, k_each)
        before = [pool.seq_len(seq) for seq in seqs]
        ok = pool.allocate_each(seqs, k_each)
        if ok and k_each:
            for seq, n in zip(seqs, before):
                self.fresh.extend(pool.seq_blocks(seq, n))
        return ok


def transfer_ms(blocks, block_bytes, gbps):
    """How long ``blocks`` blocks take at ``gbps`` decimal GB/s (0: instantaneous)."""
    if gbps == 0:
        return 0.0
    return blocks * block_bytes / (gbps * 1e6)


class VllmOffloadRank(VllmRank):
    def __init__(self, engine, timer, pool, *, callbacks, worker_idx=0, dp_rank=0,
                 scheduler_id=0):
        pool = _TrackedPool(pool)
        super().__init__(engine, timer, pool, callbacks=callbacks, worker_idx=worker_idx,
                         dp_rank=dp_rank, scheduler_id=scheduler_id)
        host = engine.native_host_offload
        self.block_bytes = engine.block_size * engine.kv_cache_bytes_per_token
        self.d2h_gbps = host.d2h_bandwidth_gbps
        self.h2d_gbps = host.h2d_bandwidth_gbps
        self.host = offload_tier(host.num_host_blocks)
        self.g3 = None
        self.tier_split = {}        # uuid -> (g1, host) reused tokens at the first admission
        self._cursor = {}           # uuid -> prompt blocks stored (or found on the host)
        self._refs = {}             # uuid -> the host keys of its prompt blocks
        self._last_store = {}       # uuid -> (done, submitted, keys) of its latest D2H
        self._holds = []            # keys of finished requests' stores the engine waits for
        self._skipq = set()         # uuids of the waiting requests that waited for a transfer
        self._loads = {}            # uuid -> [done, g1 tokens, host blocks, keys, finished,
        #                                    blocks its request needs beyond those it holds]
        self._load_rest = 0         # ... the sum of the last over the loads not yet admitted
        self._loading = {}          # host key -> loads reading it
        self._d2h_done = {}         # G1 block -> done time of the latest D2H reading it
        self._taken = {}            # G1 block -> D2H done time it was taken fresh before
        self._jobs = []             # heap of (done, order, kind, payload)
        self._order = 0
        self._d2h_tail = 0.0
        self._h2d_tail = 0.0
        self._scheduled = []        # requests that ran a chunk in the pass being formed
        self._idle_wait = False
        self._empty_wait = False    # ... with no request at all: nothing to complete
        self._started = False       # the pass being formed started a transfer
        self._loads_now = 0         # ... and how many loads
        self._now = self._preempt_fence = 0.0

    # ------------------------------------------------------------------ transfers
    def _push_job(self, done, kind, payload):
        self._order += 1
        heapq.heappush(self._jobs, (done, self._order, kind, payload))

    def _finish_transfers(self, now_ms):
        """Every transfer done by ``now_ms``, in the order they end."""
        jobs = self._jobs
        while jobs and jobs[0][0] <= now_ms:
            done, _, kind, payload = heapq.heappop(jobs)
            self._finish_job(done, kind, payload)

    def _finish_job(self, done, kind, payload):
        if kind == _D2H:
            self.host.complete(payload, shared=True)
            self._stored_hook(done, payload)
        elif kind == _H2D:
            uuid, keys = payload
            self.host.unpin(keys, shared=True)
            loading = self._loading
            for h in keys:
                n = loading[h] - 1
                if n:
                    loading[h] = n
                else:
                    del loading[h]
            self._loads[uuid][4] = True

    def _stored_hook(self, done_ms, keys):
        """A D2H store ended at ``done_ms`` (the G3 tier writes its blocks behind it)."""

    def next_transfer_ms(self):
        """When the next transfer in flight ends, or None."""
        return self._jobs[0][0] if self._jobs else None

    # ------------------------------------------------------------------ the pass
    def schedule(self, now_ms):
        self._idle_wait = self._empty_wait = False
        self._now = self._preempt_fence = now_ms
        self._finish_transfers(now_ms)
        if self._d2h_done and now_ms >= self._d2h_tail:
            # no D2H in flight any more: nothing fences a block (entries of D2H already done
            # are left until then, every reader tests their time against its clock)
            self._d2h_done = {}
            self._taken = {}
        self.pool.track = bool(self._d2h_done)
        self.pool.fresh = []
        self._scheduled = []
        self._started = False
        self._loads_now = 0
        end = super().schedule(now_ms)
        idle = end is not None and not self.progressed()
        if self._started:
            self.pass_effect = True     # a transfer started: a zero-time pass is progress
        if end is None:
            upcoming = self.next_transfer_ms()
            if upcoming is None or not self._held():
                return None
            # no request here, transfers still in flight: the reference's clock runs on to
            # their end (an empty pass that records nothing, cut short by an arrival)
            self._idle_wait = self._empty_wait = True
            self.pass_effect = False
            self.pass_end_ms = upcoming
            return upcoming
        fence = self._preempt_fence
        self._preempt_fence = now_ms
        d2h_done, taken = self._d2h_done, self._taken
        fresh = self.pool.fresh
        if fresh and d2h_done:
            # (the fresh blocks are a prompt's thousands; few of them have a D2H entry)
            for b in d2h_done.keys() & fresh:
                done = d2h_done[b]
                if done > now_ms:
                    taken[b] = done
                    if done > fence:
                        fence = done
        stores = self._prepare_stores(now_ms)
        if fence > now_ms:
            end = self.pass_end_ms = end + (fence - now_ms)
        if stores:
            self._submit_stores(stores, end)
        upcoming = self.next_transfer_ms() if end == now_ms else None
        if upcoming is not None and upcoming > now_ms and not self.running and self.waiting \
                and idle:
            # nothing to run until a transfer ends: an empty pass until then, cut short by an
            # arrival (truncate)
            self._idle_wait = True
            end = self.pass_end_ms = upcoming
        return end

    def complete(self):
        if self._empty_wait:
            self._empty_wait = False
            return
        super().complete()

    def extend(self, horizon_ms, cutoff_ms, max_passes=MAX_PASSES):
        """VllmRank's decode-only passes in one event, while the tiers can neither change nor
        be read before the run ends: no transfer in flight (a D2H ending mid-run would fence a
        decode block's allocation; an H2D admits its request at the next pass), no request
        waiting (each pass's lookup touches the host LRU) and every running prompt stored (an
        unstored one tries its store at each pass)."""
        if self._jobs or self.waiting or self._idle_wait or not self._prompts_stored():
            return self.pass_end_ms
        return super().extend(horizon_ms, cutoff_ms, max_passes)

    def _prompts_stored(self):
        cursor = self._cursor
        bs = self.block_size
        for r in self.running:
            if cursor.get(r.uuid, 0) < r.prompt_len // bs:
                return False
        return True

    def truncate(self, arrival_ms, started=False):
        if not self._idle_wait:
            return super().truncate(arrival_ms, started)
        if arrival_ms < self.pass_end_ms:
            self.pass_end_ms = arrival_ms     # the arrival starts a pass at once
        return self.pass_end_ms

    def _preempt(self, r, P):
        # a victim whose D2H still reads its blocks: the pass computes once that D2H is done
        done = self._last_store.get(r.uuid, _NO_STORE)[0]
        if done > self._preempt_fence:
            self._preempt_fence = done
        super()._preempt(r, P)
        # the requests that waited for a transfer keep their queue ahead of the ordinary one
        # (vLLM's skipped_waiting): the victim goes first in the ordinary queue, behind them
        waiting, skipq = self.waiting, self._skipq
        if skipq and len(waiting) > 1 and waiting[1].uuid in skipq:
            waiting.popleft()
            k = 0
            while k < len(waiting) and waiting[k].uuid in skipq:
                k += 1
            waiting.insert(k, r)

    def _retire(self, r, end_ms):
        uuid = r.uuid
        self._cursor.pop(uuid, None)
        self._refs.pop(uuid, None)
        done, submitted, keys = self._last_store.pop(uuid, _NO_STORE)
        if self._store_running(done, keys, end_ms):
            # a request that finishes while its store runs keeps the engine stepping until the
            # store is through (vLLM frees its blocks then)
            self._holds.append(keys)
        super()._retire(r, end_ms)

    def _store_running(self, done, keys, end_ms):
        """Whether a store ending at ``done`` is still running at ``end_ms``."""
        return done > end_ms

    def _held(self):
        """Whether a finished request's store still holds the engine: its host entries pending
        (or pinned by the write behind them)."""
        host = self.host
        self._holds = [keys for keys in self._holds
                       if any(host.state(h)[0] == PENDING or host.state(h)[1] for h in keys)]
        return bool(self._holds)

    def _run_chunk(self, r, tokens):
        self._scheduled.append(r)
        super()._run_chunk(r, tokens)

    # ------------------------------------------------------------------ stores (D2H)
    def _prepare_stores(self, now_ms):
        """The cohorts of this pass's scheduled requests, in running order."""
        bs = self.block_size
        host = self.host
        chunked = set(map(id, self._scheduled))
        stores = []
        for r in self.running:
            if not (r.in_stretch or id(r) in chunked):
                continue
            computed = r.prompt_len if r.in_stretch else min(r.computed, r.prompt_len)
            full = computed // bs
            cursor = self._cursor.get(r.uuid, 0)
            if full <= cursor:
                continue
            refs = self._host_keys(r)
            keys = refs[cursor:full]
            absent = host.absent(keys)      # (one call for the prompt)
            if not absent:
                self._cursor[r.uuid] = full
                continue
            taken = self._taken
            if taken:
                blocks = self.pool.seq_blocks(r.seq)
                if any(taken.get(b, 0.0) > now_ms for b in blocks):
                    continue    # blocks it took wait for their previous owner's D2H
                del blocks[:cursor]
            else:
                blocks = self.pool.seq_blocks(r.seq, cursor)
            if len(absent) == len(keys):    # (a new prompt: none of it on the host)
                new_keys, sources = keys, blocks[:full - cursor]
            else:
                new_keys = [keys[i] for i in absent]
                sources = [blocks[i] for i in absent]
            if host.reserve(new_keys, protect=keys) is None:
                continue        # no room: retried at its next scheduled pass
            self._cursor[r.uuid] = full
            host.touch(refs, reverse=True)
            stores.append((r, new_keys, sources))
        return stores

    def _submit_stores(self, stores, end_ms):
        d2h_done, taken = self._d2h_done, self._taken
        for r, keys, sources in stores:
            start = self._d2h_tail if self._d2h_tail > end_ms else end_ms
            done = start + transfer_ms(len(keys), self.block_bytes, self.d2h_gbps)
            self._d2h_tail = done
            d2h_done.update(dict.fromkeys(sources, done))
            if taken:
                for b in sources:
                    taken.pop(b, None)
            self._last_store[r.uuid] = (done, end_ms, keys)
            self._push_job(done, _D2H, keys)

    # ------------------------------------------------------------------ admission
    def _admit_waiting(self, now_ms, budget):
        waiting = self.waiting
        running = self.running
        before = len(running)
        skipped = []
        while waiting and len(running) < self.max_seqs:
            r = waiting[0]
            load = self._loads.get(r.uuid)
            if load is not None:
                if not load[4]:
                    skipped.append(waiting.popleft())   # its H2D is still running
                    self._skipq.add(r.uuid)
                    continue
                budget = self._admit_loaded(r, load, now_ms, budget)
                if budget is None:
                    break
                continue
            if budget <= 0:
                break           # no lookup once the pass's budget is used up
            if self._rejects(r):
                budget = super()._admit_head(now_ms, budget)
                continue
            if not self._may_look_up(r):
                skipped.append(waiting.popleft())   # nothing it waits for can have changed
                continue
            outcome = self._host_lookup(r, now_ms)
            if outcome == "wait" or outcome == "loading":
                skipped.append(waiting.popleft())
                self._skipq.add(r.uuid)
                self._deferred(r)
                continue
            if outcome == "full":
                break
            self._blocked = (None, -1, 0)
            fresh = not r.admissions
            budget = super()._admit_head(now_ms, budget)
            if budget is None:
                break
            self._skipq.discard(r.uuid)
            if fresh and r.admissions:
                self.tier_split[r.uuid] = (r.first_reused, 0)
        if skipped:
            waiting.extendleft(reversed(skipped))
        return len(running) - before

    def _may_look_up(self, r):
        """Whether a waiting request is looked up in this pass (always, without G3)."""
        return True

    def _deferred(self, r):
        """``r``'s lookup made it wait for a transfer."""

    def _rejects(self, r):
        """Whether ``_admit_head`` rejects ``r`` outright (before any lookup)."""
        if self.max_model_len is not None and r.prompt_len >= self.max_model_len:
            return True
        length = r.prompt_len + r.generated
        return not r.admissions and -(-length // self.block_size) > self.num_blocks

    def _host_lookup(self, r, now_ms):
        """Probe the host after ``r``'s G1 prefix: ``None`` (a miss, or nothing probed: admit
        normally), ``"wait"`` (a pending block), ``"full"`` (a hit G1 has no room for: stop
        admitting) or ``"loading"`` (a load was queued)."""
        bs = self.block_size
        length = r.prompt_len + r.generated
        hashes = self._lookup_hashes(r, length // bs)
        g1 = self.pool.match(hashes)
        prompt_blocks = r.prompt_len // bs
        host = self.host
        refs = self._host_keys(r)
        if g1 >= prompt_blocks:
            # nothing to probe; the lookup still touches its keys
            host.touch(refs, reverse=True)
            return None
        wait = False
        hit = []
        loading = self._loading
        reads = []
        for i in range(g1, prompt_blocks):
            h = refs[i]
            state = host.state(h)[0]
            if state == ABSENT:
                # behind the host, the storage tier may hold it (engine/offload_g3.py)
                found = self._probe_below(h, refs, reads)
                if found is None:
                    break
                if found:
                    continue
                wait = True
            elif state == PENDING or h in loading:
                wait = True
            hit.append(h)
        if self._last_store.get(r.uuid, _NO_STORE)[0] > now_ms:
            wait = True
        if reads:
            self._read_below(reads, now_ms)
            self._started = True
            wait = True
        host.touch(refs, reverse=True)
        if wait:
            return "wait"
        if not hit:
            return None
        return self._start_load(r, hashes, g1, hit, now_ms)

    def _host_keys(self, r):
        """The host keys of ``r``'s complete prompt blocks: the reference's sequence hashes,
        whose order breaks the LRU's ties (kv/ref_hashes.py)."""
        refs = self._refs.get(r.uuid)
        if refs is None:
            refs = self._refs[r.uuid] = ref_seq_hashes(r.prompt, self.block_size,
                                                       r.prompt_len // self.block_size)
        return refs

    def _probe_below(self, h, refs, reads):
        """A block missing from the host: None (nothing below it either, the probe stops),
        True (a read into the host was started for it, added to ``reads``) or False (it
        must wait). Without a tier below, None."""
        return None

    def _read_below(self, keys, now_ms):
        """Read ``keys`` from the tier below into their reserved host slots."""

    def _seat_free(self):
        """Whether max_num_seqs leaves room for one more load: a request whose load this pass
        started takes a seat from the later host hits (checked after their lookup), not from
        the requests admitted without a load, which only the running requests limit (settled
        on the reference: g2_miss_beside_load)."""
        return len(self.running) + self._loads_now < self.max_seqs

    def _start_load(self, r, hashes, g1, hit, now_ms):
        pool = self.pool
        if not self._seat_free():
            return "full"
        # room for the whole request, as an ordinary admission checks (its G1 hits referenced
        # by others cost nothing), though only the loaded blocks are reserved now
        active_hits = pool.match_counts(hashes)[1]
        length = r.prompt_len + r.generated
        blocks = -(-length // self.block_size)
        # the loads started before (this pass or earlier) and not yet admitted keep room for
        # the rest of their request: a later load starts only beside it (settled on the
        # reference: tests/test_g2_load_room.py); an admission without a load does not
        # count it
        room = self.num_blocks - pool.active() - self._load_rest
        if blocks - min(active_hits, g1) > room:
            return "full"
        seq = pool.new_seq()
        marker = len(pool.fresh)
        if not pool.acquire_allocate(seq, hashes, 0, g1, len(hit)):
            pool.release(seq)
            return "full"
        fresh = pool.fresh[marker:]
        del pool.fresh[marker:]      # reserved for the load: no compute of this pass uses them
        ready = now_ms
        d2h_done = self._d2h_done
        for b in fresh:
            done = d2h_done.get(b)
            if done is not None and done > ready:
                ready = done
        start = self._h2d_tail if self._h2d_tail > ready else ready
        done = start + transfer_ms(len(hit), self.block_bytes, self.h2d_gbps)
        self._h2d_tail = done
        r.seq = seq
        r.held_blocks = g1 + len(hit)
        r.committed_blocks = g1
        self.held_total += g1 + len(hit)
        self.kv_version += 1
        self.host.pin(hit)
        loading = self._loading
        for h in hit:
            loading[h] = loading.get(h, 0) + 1
        rest = blocks - g1 - len(hit)
        if rest < 0:
            rest = 0
        self._load_rest += rest
        self._loads[r.uuid] = [done, g1 * self.block_size, len(hit), hashes, False, rest]
        # (even an instantaneous load is seen done at the next pass: at once on an idle worker)
        self._push_job(done, _H2D, (r.uuid, hit))
        self._started = True
        self._loads_now += 1
        return "loading"

    def _admit_loaded(self, r, load, now_ms, budget):
        """Admit ``r`` after its H2D: the loaded blocks count as cached. Returns the budget
        left, or None when it has to wait (nothing behind it may start)."""
        bs = self.block_size
        pool = self.pool
        held = r.held_blocks
        if r.committed_blocks < held:
            pool.commit(r.seq, load[3], r.committed_blocks, held - r.committed_blocks)
            self.kv_version += 1
            r.committed_blocks = held
        length = r.prompt_len + r.generated
        cached = min(held * bs, length)
        if r.generated < r.max_output:
            cap = ((length - 1) // bs) * bs
            if cached > cap:
                cached = cap
        needed = -(-length // bs) - held
        if needed > self.num_blocks - pool.active():
            return None
        remaining = length - cached
        prompt_left = r.prompt_len - cached
        if not self.chunked and 0 < prompt_left and prompt_left > budget:
            return None
        tokens = remaining if remaining < budget else budget
        if tokens == 0 and remaining > 0:
            return None
        self.waiting.popleft()
        self._load_rest -= self._loads.pop(r.uuid)[5]
        self._skipq.discard(r.uuid)
        fresh = not r.admissions
        r.computed = cached
        r.status = RUNNING
        self.running.append(r)
        self.partial.append(r)
        self._run_chunk(r, tokens)
        r.admissions.append((now_ms, cached, not fresh))
        if fresh:
            r.first_reused = cached
            g1 = min(load[1], cached)
            self.tier_split[r.uuid] = (g1, cached - g1)
        if cached > r.max_reused:
            r.max_reused = cached
        self._cursor[r.uuid] = cached // bs
        return budget - tokens

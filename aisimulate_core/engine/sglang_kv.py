"""KV bookkeeping of an SGLang rank: radix-tree matches, page allocation, tree inserts.

Each token a running request decodes is put on the tree in the reference; here a decoder's own
tokens join the tree lazily, when the request finishes or is retracted, stamped with the access
time the reference would have given them. Until then they are locked pages of the request,
which is the same for every capacity figure (locked tree pages and private pages are both
unavailable and not evictable), and nobody else can match them (outputs are unique to a
request).

Access times are ordering keys: the pass, then a phase (0 admission matches and chunk caching,
1 token appends in running order, keyed by the request's join number, 2 completions), then the
order inside the phase. That reproduces the order in which the reference reads its clock.
"""

from __future__ import annotations

from .sglang_tokens import ensure_tokens

_PHASE_BITS = 34


def stamp(pass_index, phase, k):
    return (((pass_index << 2) | phase) << _PHASE_BITS) | k


class SglangKv:
    """Mixed into SglangRank: ``self.cache``, ``self.running``, ``self.page_size``,
    ``self.caching`` and ``self.pass_index`` are the rank's; ``self._stored`` (a list while a
    router watches the rank, else None) collects the spans each insert puts on the tree."""

    def _stamp0(self):
        self._k0 += 1
        return stamp(self.pass_index, 0, self._k0)

    def _stamp2(self):
        self._k2 += 1
        return stamp(self.pass_index, 2, self._k2)

    def _allocate_fresh(self, r, cap, chunk_end):
        """Lock the cached prefix (at most ``cap`` tokens) and allocate the rest of the chunk."""
        cache = self.cache
        ps = self.page_size
        if self.caching:
            tokens = ensure_tokens(r, chunk_end)
            prefix, node = cache.match_and_lock(tokens, cap, self._stamp0())
        else:
            prefix, node = 0, cache.root
        need = -(-chunk_end // ps) * ps - prefix
        if not self._make_room(need):
            if node is not cache.root:
                cache.unlock(node)
            return None
        cache.allocate(need)
        r.seq = node
        r.committed_blocks = prefix
        r.open_start = None               # not a decoder (yet) in this admission
        return prefix

    def _extend_allocation(self, r, chunk_end):
        ps = self.page_size
        need = -(-chunk_end // ps) * ps - r.held_blocks
        if need > 0:
            if not self._make_room(need):
                return None
            self.cache.allocate(need)
        return r.computed

    def _make_room(self, need):
        """Evict for ``need`` free tokens; False (nothing evicted) when the pool cannot hold them."""
        cache = self.cache
        free = cache.available()
        if need > free + cache.evictable_size:
            return False
        if need > free:
            cache.evict(need - free)
        return cache.available() >= need

    # ------------------------------------------------------------------ tree bookkeeping
    def _cache_materialized(self, r, access):
        """Put a running request's whole materialized pages on the tree (its lock moves along)."""
        if not self.caching:
            return
        ps = self.page_size
        aligned = r.computed - r.computed % ps
        if aligned <= r.committed_blocks:
            return
        self._insert_own(r, aligned, access)

    def _insert_own(self, r, upto, access):
        cache = self.cache
        old = r.seq
        tokens = ensure_tokens(r, upto)
        node, present = cache.insert(old, tokens, r.committed_blocks, upto, access, access)
        if self._stored is not None:
            self._stored.append((r, r.committed_blocks, upto))
        if node is not old:
            cache.lock(node)
            if old is not cache.root:
                cache.unlock(old)
        if present:
            cache.free(present)       # its own copies of pages another request put there first
        r.seq = node
        r.committed_blocks = upto

    def _flush_deferred(self, r, final_uncached):
        """Put a decoder's deferred pages on the tree, stamped when the reference did it.

        In the reference every decode step caches the request's whole pages; the last such
        insert (the page completed last, or the catch-up on its first decode step) set the
        stamps that LRU eviction reads. ``final_uncached``: its last token was never cached."""
        if not self.caching or r.seq is None:
            return
        emitted = self.running.D - r.open_start - (1 if final_uncached else 0)
        if emitted <= 0:
            return
        ps = self.page_size
        start_len = r.prompt_len + r.base_gen
        materialized = start_len + emitted
        aligned = materialized - materialized % ps
        if aligned <= r.committed_blocks:
            return
        step = aligned - start_len if aligned > start_len else 1
        pass_index = self.running.dec_pass[r.open_start + step - 1]
        self._insert_own(r, aligned, stamp(pass_index, 1, r.bucket_key))

    def _release(self, r):
        """Retraction: free the pages not on the tree and unlock the path."""
        cache = self.cache
        self._flush_deferred(r, False)
        node = r.seq
        if node is None:
            return
        owned = r.held_blocks - r.committed_blocks
        if owned:
            cache.free(owned)
        if node is not cache.root:
            cache.unlock(node)
        r.seq = None
        r.held_blocks = 0
        r.committed_blocks = 0
        r.computed = 0

    def _finish_kv(self, r, access=None):
        """A finished request leaves its whole pages on the tree, unlocked (stamped ``access``,
        by default the next completion stamp of the pass)."""
        cache = self.cache
        node = r.seq
        if node is None:
            return
        ps = self.page_size
        if not self.caching:
            cache.free(r.held_blocks)
            r.seq = None
            return
        if r.open_start is not None:      # it decoded (and has left the running batch)
            self._flush_deferred(r, True)
        node = r.seq
        length = r.prompt_len + r.generated
        upto = min(length, r.computed)
        upto -= upto % ps
        cache.free(r.held_blocks - upto)
        if upto > r.committed_blocks:
            tokens = ensure_tokens(r, upto)
            if access is None:
                access = self._stamp2()
            _, present = cache.insert(node, tokens, r.committed_blocks, upto, access, access)
            if present:
                cache.free(present)
            if self._stored is not None:
                self._stored.append((r, r.committed_blocks, upto))
        if node is not cache.root:
            cache.unlock(node)
        r.seq = None
        r.held_blocks = 0
        r.hash_cache = None               # tree edges keep the token array while they need it

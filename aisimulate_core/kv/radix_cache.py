"""SGLang's radix-tree KV cache (SEMANTICS 2.6), counted in tokens over a fixed page pool.

The tree holds token sequences on compressed edges. An edge does not copy its tokens: it
points at the token array of a request that holds the same path and covers the absolute depths
``[start, end)`` of it (every array holding a path agrees on it, so any of them will do).
Lengths and depths are whole pages; two pages are the same page when their tokens are equal.

Physical page identities are not modelled, only counts: the pool's free tokens, the tokens on
unlocked edges (``evictable_size``) and on locked ones (``protected_size``). A request's own
pages that are not on the tree are the caller's business (it allocates and frees them here).

Least recently used unlocked leaves are evicted first. Access times are caller-given ordering
keys (any increasing ints), because the engine replays some touches lazily with the time the
reference would have stamped them.

Eviction log (for the router's "removed" KV events; off by default and then free), as the
block pool's: ``log_evictions(enabled)``, ``take_evicted(absent_only=False) -> array('Q')``.
The tree keeps no hashes, so an evicted page is named by the sequence hash of its tokens'
block chain from the root (``hashing.seq_hashes`` with ``block_size = page_size``), the hash
the vLLM pools and the router give the same prompt block. Leaves come in eviction order, a
leaf's pages deepest first. Eviction notes the leaf's span; the take hashes it (O(depth) per
evicted leaf, paid only while the log is on) and, with ``absent_only``, skips the pages that
are on the tree again.
"""

from __future__ import annotations

import heapq
from array import array

from . import hashing
from .block_pool import EvictionLog


class Node:
    __slots__ = ("parent", "children", "src", "start", "end", "lock", "access", "heap_key", "alive")

    def __init__(self, parent, src, start, end, access):
        self.parent = parent
        self.children = {}
        self.src = src          # token array covering depths [start, end)
        self.start = start
        self.end = end
        self.lock = 0
        self.access = access
        self.heap_key = None    # the live entry of this node in the eviction heap, if any
        self.alive = True


def common_prefix(a, b, lo, hi):
    """Length of the common prefix of ``a[lo:hi]`` and ``b[lo:hi]`` (C-speed slice compares)."""
    if hi <= lo:
        return 0
    if a is b or a[lo:hi] == b[lo:hi]:
        return hi - lo
    ok, bad = lo, hi          # a[lo:ok] equal; a[lo:bad] not
    while bad - ok > 1:
        mid = (ok + bad) // 2
        if a[ok:mid] == b[ok:mid]:
            ok = mid
        else:
            bad = mid
    return ok - lo


class RadixCache:
    def __init__(self, total_tokens, page_size, *, trim_partial_leaf=True):
        self.page_size = page_size
        self.total_tokens = (total_tokens // page_size) * page_size
        self.free_tokens = self.total_tokens
        self.evictable_size = 0
        self.protected_size = 0
        self.root = Node(None, None, 0, 0, 0)
        self._heap = []
        self._seq = 0
        self._compact_at = 1 << 16
        self.inserts = 0     # bumped when tokens join the tree (a memoized match may grow)
        # the reference trims an evicted leaf to the pages it needs (keeps its older prefix)
        self.trim_partial_leaf = trim_partial_leaf
        self._eviction_log = EvictionLog(list)   # (token array, lo, hi) of evicted spans

    # ------------------------------------------------------------------ pool
    def available(self):
        return self.free_tokens

    def allocate(self, tokens):
        """Take ``tokens`` (whole pages) from the free pool; False when they are not there."""
        if tokens > self.free_tokens:
            return False
        self.free_tokens -= tokens
        return True

    def free(self, tokens):
        self.free_tokens += tokens

    # ------------------------------------------------------------------ keys
    def _page_key(self, tokens, depth):
        ps = self.page_size
        if ps == 1:
            return tokens[depth]
        return tokens[depth:depth + ps].tobytes()

    def _common_pages(self, node, tokens, limit):
        """Tokens (whole pages) of ``node``'s edge that ``tokens`` repeats, up to depth ``limit``."""
        hi = node.end if node.end < limit else limit
        common = common_prefix(node.src, tokens, node.start, hi)
        ps = self.page_size
        return common - common % ps

    # ------------------------------------------------------------------ evictable leaves
    def _index_leaf(self, node):
        self._seq += 1
        key = (node.access, self._seq, node)
        node.heap_key = key
        heapq.heappush(self._heap, key)
        if len(self._heap) > self._compact_at:
            self.compact_heap()

    def _unindex_leaf(self, node):
        node.heap_key = None

    def _touch(self, node, access):
        if node.heap_key is not None:
            node.access = access
            self._index_leaf(node)
        else:
            node.access = access

    def touch_path(self, node, access):
        """Stamp ``node`` and its ancestors (never lowering a stamp: touches replayed late)."""
        root = self.root
        while node is not root:
            if access > node.access:
                self._touch(node, access)
            node = node.parent

    # ------------------------------------------------------------------ matching
    def match_len(self, tokens, limit):
        """Read-only: how many leading tokens (whole pages, at most ``limit``) are on the tree."""
        return self.match_where(tokens, limit)[0]

    def still_matches(self, matched, node, inserts):
        """Whether a ``match_where`` answer (``matched``, ``node``) taken when ``self.inserts``
        was ``inserts`` still holds: nothing joined the tree since, and eviction (which only
        removes or shortens leaves) left the edge holding the matched depth in place."""
        return inserts == self.inserts and (matched == 0 or (node.alive and node.end >= matched))

    def match_where(self, tokens, limit):
        """``match_len`` and the node whose edge holds the last matched token (root if none)."""
        node = self.root
        depth = 0
        ps = self.page_size
        limit -= limit % ps
        while depth < limit:
            child = node.children.get(self._page_key(tokens, depth))
            if child is None:
                break
            common = self._common_pages(child, tokens, limit)
            if common == 0:
                break
            depth += common
            node = child
            if child.end > depth:
                break
        return depth, node

    def match_and_lock(self, tokens, limit, access):
        """Match at most ``limit`` tokens, splitting a partly matched edge, and lock the path.

        Fully matched edges are stamped ``access``; a partly matched edge keeps its stamp.
        Returns (matched tokens, the locked node)."""
        node = self.root
        depth = 0
        ps = self.page_size
        limit -= limit % ps
        last_full = None
        while depth < limit:
            child = node.children.get(self._page_key(tokens, depth))
            if child is None:
                break
            if last_full is not None:
                self._touch(last_full, access)
                last_full = None
            common = self._common_pages(child, tokens, limit)
            if child.start + common < child.end:
                if common > 0:
                    node = self._split(child, common)
                depth += common
                break
            depth += common
            node = child
            last_full = child
        if last_full is not None:
            # stamped while out of the leaf index, then locked
            self._unindex_leaf(last_full)
            last_full.access = access
        self.lock(node)
        return depth, node

    # ------------------------------------------------------------------ locks
    def lock(self, node):
        root = self.root
        while node is not root:
            if node.lock == 0:
                node.heap_key = None
                size = node.end - node.start
                self.evictable_size -= size
                self.protected_size += size
            node.lock += 1
            node = node.parent

    def unlock(self, node):
        root = self.root
        while node is not root:
            node.lock -= 1
            if node.lock == 0:
                size = node.end - node.start
                self.protected_size -= size
                self.evictable_size += size
                if not node.children:
                    self._index_leaf(node)
            node = node.parent

    # ------------------------------------------------------------------ structure
    def _split(self, child, common):
        """Cut ``child``'s edge after ``common`` tokens; returns the new upper node."""
        parent = child.parent
        upper = Node(parent, child.src, child.start, child.start + common, child.access)
        upper.lock = child.lock
        parent.children[self._page_key(child.src, child.start)] = upper
        child.start += common
        child.parent = upper
        upper.children[self._page_key(child.src, child.start)] = child
        return upper

    def _create_child(self, parent, tokens, start, end, access):
        self.inserts += 1
        node = Node(parent, tokens, start, end, access)
        if parent.heap_key is not None:
            parent.heap_key = None
        parent.children[self._page_key(tokens, start)] = node
        self._index_leaf(node)
        self.evictable_size += end - start
        return node

    def _extend_leaf(self, node, tokens, end, access):
        self.inserts += 1
        added = end - node.end
        node.src = tokens
        node.end = end
        node.access = access
        if node.lock == 0:
            self.evictable_size += added
            if node.heap_key is not None:
                self._index_leaf(node)
        else:
            self.protected_size += added

    def insert(self, start_node, tokens, start, end, access, create_access, allow_locked_tail=True):
        """Put ``tokens[start:end]`` (whole pages) on the tree below ``start_node`` (at depth
        ``start``). Returns (the node holding depth ``end``, tokens that were already there).

        ``create_access`` stamps a new edge (the reference reads its clock again for it)."""
        if end <= start:
            return start_node, 0
        root = self.root
        self.touch_path(start_node, access)
        node = start_node
        depth = start
        present = 0
        while depth < end:
            if (node is not root and not node.children
                    and (node.lock == 0
                         or (allow_locked_tail and node is start_node and node.lock == 1))):
                self._extend_leaf(node, tokens, end, access)
                return node, present
            child = node.children.get(self._page_key(tokens, depth))
            if child is None:
                return self._create_child(node, tokens, depth, end, create_access), present
            common = self._common_pages(child, tokens, end)
            if child.start + common == child.end:
                depth += common
                present += common
                node = child
                self._touch(child, access)
                continue
            if common > 0:
                upper = self._split(child, common)
                depth += common
                present += common
                if depth < end:
                    return self._create_child(upper, tokens, depth, end, create_access), present
                return upper, present
            return node, present
        return node, present

    # ------------------------------------------------------------------ eviction
    def log_evictions(self, enabled):
        self._eviction_log.enable(enabled)

    def take_evicted(self, absent_only=False):
        return hash_evicted(self, self._eviction_log.take() or (), absent_only)

    def evict(self, tokens):
        """Free at least ``tokens`` from unlocked leaves, least recently used first."""
        evicted = 0
        ps = self.page_size
        root = self.root
        while evicted < tokens and self._heap:
            key = heapq.heappop(self._heap)     # (indexing may compact and replace the heap)
            node = key[2]
            if node.heap_key is not key:
                continue
            size = node.end - node.start
            want = tokens - evicted
            want = -(-want // ps) * ps
            logged = self._eviction_log.entries
            if self.trim_partial_leaf and want < size:
                if logged is not None:
                    logged.append((node.src, node.end - want, node.end))
                node.end -= want
                self.evictable_size -= want
                self.free_tokens += want
                evicted += want
                self._index_leaf(node)
                continue
            if logged is not None:
                logged.append((node.src, node.start, node.end))
            node.heap_key = None
            node.alive = False
            parent = node.parent
            del parent.children[self._page_key(node.src, node.start)]
            self.evictable_size -= size
            self.free_tokens += size
            evicted += size
            if parent is not root and not parent.children and parent.lock == 0:
                self._index_leaf(parent)
        return evicted

    def tree(self):
        """The tree below the root as nested ``(edge tokens, start, end, access, lock,
        children)``, children sorted (the differential tests compare it across backends)."""
        return _subtree(self.root)

    def compact_heap(self):
        """Drop stale eviction entries (re-stamped, locked or evicted leaves leave theirs
        behind) so the heap stays proportional to the live leaves."""
        live = [key for key in self._heap if key[2].heap_key is key]
        heapq.heapify(live)
        self._heap = live
        self._compact_at = max(1 << 16, 2 * len(live))


def _subtree(node):
    return sorted((tuple(child.src[child.start:child.end]), child.start, child.end,
                   child.access, child.lock, _subtree(child))
                  for child in node.children.values())


def hash_evicted(cache, spans, absent_only):
    """``take_evicted``'s answer from the logged spans ``(path tokens, lo, hi)``: the sequence
    hashes of pages ``lo .. hi`` of each path, deepest first, with ``absent_only`` those not
    on ``cache``'s tree again (shared by the C cache's wrapper, kv/radix_native.py)."""
    evicted = array("Q")
    ps = cache.page_size
    for src, lo, hi in spans:
        if absent_only:
            lo = max(lo, cache.match_len(src, hi))
        if lo < hi:
            pages = hashing.seq_hashes(src[:hi], ps)[lo // ps:hi // ps]
            pages.reverse()
            evicted.extend(pages)
    return evicted

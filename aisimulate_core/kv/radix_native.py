"""SGLang's radix-tree KV cache in C (csrc/radix_cache.c): ``NativeRadixCache``.

The same API as ``RadixCache`` (kv/radix_cache.py, its twin and specification), with nodes
named by int handles instead of objects: the root is 0, a handle of an evicted node stays
dead (``still_matches`` answers False for it), and the handles compare with ``==``, not
``is``. Tokens go in as ``array('I')`` (read in place). ``make_radix_cache`` builds the one
the backend selects (``AISIMULATE_BACKEND``).

The eviction log keeps each evicted span's path tokens in C; ``take_evicted`` hashes them
as the twin does (``radix_cache.hash_evicted``).
"""

from __future__ import annotations

from array import array

from .. import native
from .radix_cache import RadixCache, hash_evicted

_U32 = native.ffi.typeof("uint32_t[]") if native.ffi is not None else None


def make_radix_cache(total_tokens, page_size, *, trim_partial_leaf=True, backend=None):
    """The radix cache of the selected backend: C, or the Python twin."""
    if native.resolve_backend(backend) == "c":
        return NativeRadixCache(total_tokens, page_size, trim_partial_leaf=trim_partial_leaf)
    return RadixCache(total_tokens, page_size, trim_partial_leaf=trim_partial_leaf)


def _check(status, operation):
    if status < 0:
        raise native.status_error(status, operation)
    return status


class NativeRadixCache:
    backend = "c"
    root = 0

    def __init__(self, total_tokens, page_size, *, trim_partial_leaf=True):
        ffi, lib = native.ffi, native.lib
        self._c = native.open_handle("aisim_radix", lib.aisim_radix_new, lib.aisim_radix_free,
                                     "aisim_radix_new", total_tokens, page_size,
                                     bool(trim_partial_leaf))
        self._view = native.handle_view(self._c, "aisim_radix_view", lib.aisim_radix_view_of)
        self._out = ffi.new("int64_t[]", 6)
        self.page_size = page_size
        self.total_tokens = self._view.total_tokens
        self.trim_partial_leaf = bool(trim_partial_leaf)

    @classmethod
    def borrow(cls, handle, owner, page_size):
        """A wrapper of a cache another C object owns (an SGLang rank's): ``owner`` is kept
        alive with it, and frees the cache."""
        cache = cls.__new__(cls)
        cache._c = handle
        cache._owner = owner
        cache._view = native.handle_view(handle, "aisim_radix_view", native.lib.aisim_radix_view_of)
        cache._out = native.ffi.new("int64_t[]", 6)
        cache.page_size = page_size
        cache.total_tokens = cache._view.total_tokens
        cache.trim_partial_leaf = bool(cache._view.trim_partial_leaf)
        return cache

    # ------------------------------------------------------------------ counters (C's)
    @property
    def free_tokens(self):
        return self._view.free_tokens

    @free_tokens.setter
    def free_tokens(self, value):
        native.lib.aisim_radix_set_free(self._c, value)

    @property
    def evictable_size(self):
        return self._view.evictable_size

    @property
    def protected_size(self):
        return self._view.protected_size

    @property
    def inserts(self):
        return self._view.inserts

    # ------------------------------------------------------------------ pool
    def available(self):
        return self._view.free_tokens

    def allocate(self, tokens):
        """Take ``tokens`` (whole pages) from the free pool; False when they are not there."""
        return native.lib.aisim_radix_allocate(self._c, tokens) == 0

    def free(self, tokens):
        native.lib.aisim_radix_release(self._c, tokens)

    # ------------------------------------------------------------------ matching
    def match_len(self, tokens, limit):
        return self.match_where(tokens, limit)[0]

    def match_where(self, tokens, limit):
        out = self._out
        _check(native.lib.aisim_radix_match(self._c, native.ffi.from_buffer(_U32, tokens),
                                            len(tokens), limit, out), "aisim_radix_match")
        return out[0], out[1]

    def still_matches(self, matched, node, inserts):
        return native.lib.aisim_radix_still_matches(self._c, matched, node, inserts) == 1

    def match_and_lock(self, tokens, limit, access):
        out = self._out
        _check(native.lib.aisim_radix_match_and_lock(
            self._c, native.ffi.from_buffer(_U32, tokens), len(tokens), limit, access, out),
            "aisim_radix_match_and_lock")
        return out[0], out[1]

    # ------------------------------------------------------------------ locks
    def lock(self, node):
        _check(native.lib.aisim_radix_lock(self._c, node), "aisim_radix_lock")

    def unlock(self, node):
        _check(native.lib.aisim_radix_unlock(self._c, node), "aisim_radix_unlock")

    def touch_path(self, node, access):
        _check(native.lib.aisim_radix_touch_path(self._c, node, access), "aisim_radix_touch_path")

    # ------------------------------------------------------------------ structure
    def insert(self, start_node, tokens, start, end, access, create_access,
               allow_locked_tail=True):
        out = self._out
        _check(native.lib.aisim_radix_insert(
            self._c, start_node, native.ffi.from_buffer(_U32, tokens), len(tokens), start, end,
            access, create_access, allow_locked_tail, out), "aisim_radix_insert")
        return out[0], out[1]

    # ------------------------------------------------------------------ eviction
    def evict(self, tokens):
        out = self._out
        _check(native.lib.aisim_radix_evict(self._c, tokens, out), "aisim_radix_evict")
        return out[0]

    def log_evictions(self, enabled):
        _check(native.lib.aisim_radix_log_evictions(self._c, bool(enabled)),
               "aisim_radix_log_evictions")

    def take_evicted(self, absent_only=False):
        view = self._view
        n = view.n_log
        spans = []
        if n:
            ffi = native.ffi
            values = ffi.unpack(view.log_spans, 3 * n)
            for i in range(0, 3 * n, 3):
                lo, hi, offset = values[i:i + 3]
                path = array("I")
                path.frombytes(ffi.buffer(view.log_tokens + offset, 4 * hi))
                spans.append((path, lo, hi))
            native.lib.aisim_radix_log_clear(self._c)
        return hash_evicted(self, spans, absent_only)

    def compact_heap(self):
        """The C heap is indexed (no stale entries): nothing to drop."""

    # ------------------------------------------------------------------ inspection
    def node_fields(self, node):
        """(start, end, access, lock, children, indexed) of a live node."""
        out = self._out
        _check(native.lib.aisim_radix_node(self._c, node, out), "aisim_radix_node")
        return tuple(out[0:6])

    def check(self):
        """Raise unless the C structures agree with each other (counts, children, heap)."""
        _check(native.lib.aisim_radix_check(self._c), "aisim_radix_check")

    def tree(self):
        """``RadixCache.tree``: nested ``(edge tokens, start, end, access, lock, children)``."""
        ffi = native.ffi
        view = self._view
        n_rows = view.nodes - 1
        n_tokens = view.evictable_size + view.protected_size
        rows = ffi.new("int64_t[]", 6 * max(n_rows, 1))
        tokens = ffi.new("uint32_t[]", max(n_tokens, 1))
        got = _check(native.lib.aisim_radix_dump(self._c, rows, n_rows, tokens, n_tokens),
                     "aisim_radix_dump")
        values = ffi.unpack(rows, 6 * got)
        flat = ffi.unpack(tokens, n_tokens)
        children = {}
        at = 0
        for i in range(0, 6 * got, 6):
            handle, parent, start, end, access, lock = values[i:i + 6]
            edge = tuple(flat[at:at + end - start])
            at += end - start
            children.setdefault(parent, []).append((handle, (edge, start, end, access, lock)))

        def subtree(handle):
            return sorted(fields + (subtree(child),) for child, fields in children.get(handle, ()))

        return subtree(0)

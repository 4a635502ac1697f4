"""Paged KV block pool with prefix caching (vLLM / TensorRT-LLM engines).

``BlockPool(num_blocks, backend=None)`` builds the C pool or its Python twin
(``aisimulate_core.native`` decides; both give identical results, block ids
included). The rules follow the reference's vLLM G1 pool; csrc/kv_pool.c
explains them. A sequence (one request) is a small int handle owning a table
of physical blocks; every call takes a whole request's hashes at once.

Queries: ``num_blocks``, ``allocatable()`` (free + evictable), ``active()``
(referenced blocks), ``cached()`` (hashed blocks resident), ``free_blocks()``,
``inactive()``, ``live_seqs()``, ``evictions`` (hashed copies evicted so far),
``seq_len(seq)``, ``seq_blocks(seq, start=0)`` (its blocks from ``start`` on),
``match(hashes, start=0)`` and
``match_counts(hashes, start=0) -> (resident, active)`` (how many of the hits
are referenced right now: the reference's ``PrefixHit::is_active``).

Changes: ``new_seq()``, ``acquire(seq, hashes, start, n)``,
``allocate(seq, k) -> bool``, ``acquire_allocate(seq, hashes, start, n, k) ->
bool`` (the reference's atomic admission: prefix hits pinned, then k fresh
blocks, or nothing), ``allocate_each(seqs, k_each=1) -> bool``,
``commit(seq, hashes, first_block, count)``, ``release(seq)``; ``check()``
verifies every invariant. Allocation refusals return False and change
nothing; misuse raises NativeError: NativeArgumentError (also a ValueError)
for bad arguments, NativeMemoryError (also a MemoryError) when the pool cannot
be allocated, plain NativeError for an unknown handle, a hash not resident or
a conflicting commit. ``owner`` (a rank and the JSON field of its size) names
the pool in those messages.

Eviction log (for the router's "removed" KV events; off by default and then
free): ``log_evictions(enabled)`` turns it on or off (off drops what it
holds); ``take_evicted(absent_only=False) -> array('Q')`` returns, oldest
first, the hashes that an eviction took out of the pool since the last take,
and empties the log. A hash is logged when the last resident copy of it is
evicted (a duplicate copy going leaves the hash findable, so it logs nothing;
blocks never committed hold no hash and are never evicted, only freed); so
``evictions`` counts copies and may exceed what the log received.
``absent_only=True`` skips the hashes committed again since their eviction:
a pass's "stored" hashes applied first, then these, leave a router's index
equal to the pool's resident hashes, whatever the order of the pass's
evictions and commits.

``hashes`` is an ``array('Q')`` (fastest); a bytes-like object or a list of
ints also works.
"""

from array import array

from aisimulate_core.native import (
    EBADSEQ,
    EINVAL,
    NOSPACE,
    ffi,
    handle_view,
    lib,
    open_handle,
    resolve_backend,
    status_error,
)

# The pools are lazy (state only for the blocks handed out), so any u64 capacity is fine:
# the reference accepts the same range.
MAX_BLOCKS = (1 << 64) - 1


class BlockPool:
    """Factory and common type of the C pool and its Python twin."""

    __slots__ = ()
    backend = None
    _label = "BlockPool"

    def _named(self, operation):
        """``operation`` ("BlockPool.release") with the pool's owner, for error messages."""
        return self._label + operation[len("BlockPool"):]

    def __new__(cls, num_blocks, backend=None, *, owner=None):
        if cls is BlockPool:
            if resolve_backend(backend) == "c":
                cls = CBlockPool
            else:
                from aisimulate_core.kv.py_block_pool import PyBlockPool

                cls = PyBlockPool
        return object.__new__(cls)


class EvictionLog:
    """The eviction log of the Python pools (this one's twin and the radix cache):
    ``entries`` is a fresh ``make()`` while the log is on and None while it is off, so
    that an eviction pays one ``is not None`` test when nobody listens."""

    __slots__ = ("entries", "make")

    def __init__(self, make):
        self.entries = None
        self.make = make

    def enable(self, enabled):
        if not enabled:
            self.entries = None  # drops what was logged: nobody is listening
        elif self.entries is None:
            self.entries = self.make()

    def take(self):
        """What was logged since the last take (None while off); the log starts afresh."""
        entries = self.entries
        if entries is not None:
            self.entries = self.make()
        return entries


def as_hashes(hashes):
    """A sequence of u64 ints from an ``array('Q')``, a bytes-like object or a list."""
    if isinstance(hashes, (bytes, bytearray, memoryview)):
        view = memoryview(hashes)
        if view.format != "Q":
            view = view.cast("B").cast("Q")
        return view
    return hashes


def check_span(operation, total, start, count):
    if start < 0 or count < 0 or start + count > total:
        raise status_error(
            EINVAL, operation, f"hashes[{start}:{start + count}] is outside {total} hashes"
        )


def check_count(operation, name, value):
    if value < 0:
        raise status_error(EINVAL, operation, f"{name} must be >= 0, got {value}")


def pool_label(owner):
    """``BlockPool`` or ``BlockPool[<owner>]``: how run-time errors name the pool."""
    return "BlockPool" if owner is None else f"BlockPool[{owner}]"


def pool_operation(owner):
    """How messages name a pool: ``BlockPool(<owner>)``, the owner being the rank and the
    JSON field its size came from (``$.spec.engine.rank.num_gpu_blocks, worker 0 rank 1``)."""
    return f"BlockPool({owner or ''})"


def check_num_blocks(num_blocks, owner=None):
    if not 0 < num_blocks <= MAX_BLOCKS:
        raise status_error(
            EINVAL, pool_operation(owner), f"num_blocks must be in 1..{MAX_BLOCKS}, got {num_blocks}"
        )


# Parsed once: cffi call overhead dominates these wrappers, so they avoid
# re-parsing type names and extra Python calls on the common path.
_U64_ARRAY = ffi.typeof("uint64_t[]") if ffi is not None else None
_I32_ARRAY = ffi.typeof("int32_t[]") if ffi is not None else None
_ZERO_HASH = array("Q", [0])


def _hash_buffer(hashes):
    if type(hashes) is not array or hashes.typecode != "Q":
        if isinstance(hashes, (bytes, bytearray, memoryview)):
            hashes = as_hashes(hashes)
        else:
            hashes = array("Q", hashes)
    return ffi.from_buffer(_U64_ARRAY, hashes), len(hashes)


def _handle_buffer(seqs):
    if type(seqs) is not array or seqs.typecode != "i":
        seqs = array("i", seqs)
    return seqs, ffi.from_buffer(_I32_ARRAY, seqs)


class CBlockPool(BlockPool):
    """The pool in C; counters are read from the view struct the C side keeps current."""

    __slots__ = ("_pool", "_view", "_label")
    backend = "c"

    def __init__(self, num_blocks, backend=None, *, owner=None):
        check_num_blocks(num_blocks, owner)
        self._label = pool_label(owner)
        self._pool = open_handle("aisim_kv_pool", lib.aisim_kv_new, lib.aisim_kv_free,
                                 pool_operation(owner), num_blocks, detail=f"{num_blocks} blocks")
        self._view = handle_view(self._pool, "aisim_kv_view", lib.aisim_kv_view_of)

    # ------------------------------------------------------------ counters

    @property
    def num_blocks(self):
        return self._view.num_blocks

    @property
    def evictions(self):
        return self._view.evictions

    def allocatable(self):
        view = self._view
        return view.free + view.inactive

    def free_blocks(self):
        return self._view.free

    def inactive(self):
        return self._view.inactive

    def active(self):
        return self._view.active

    def cached(self):
        return self._view.cached

    def live_seqs(self):
        return self._view.live_seqs

    # ----------------------------------------------------------- sequences

    def new_seq(self):
        seq = lib.aisim_kv_new_seq(self._pool)
        if seq < 0:
            raise status_error(seq, f"{self._label}.new_seq")
        return seq

    def seq_len(self, seq):
        length = lib.aisim_kv_seq_len(self._pool, seq)
        if length < 0:
            raise status_error(length, f"{self._label}.seq_len(seq={seq})")
        return length

    def seq_blocks(self, seq, start=0):
        length = lib.aisim_kv_seq_len(self._pool, seq)
        if length < 0:
            raise status_error(length, f"{self._label}.seq_blocks(seq={seq})")
        out = ffi.new("int32_t[]", length)
        lib.aisim_kv_seq_blocks(self._pool, seq, out, length)
        start = min(max(start, 0), length)
        return ffi.unpack(out + start, length - start)   # (ints made for the tail only)

    # -------------------------------------------------------------- lookup

    def match(self, hashes, start=0):
        buffer, total = _hash_buffer(hashes)
        if start:
            check_span("BlockPool.match", total, start, 0)
            buffer += start
        count = lib.aisim_kv_match(self._pool, buffer, total - start)
        if count < 0:
            raise status_error(count, f"{self._label}.match")
        return count

    def match_counts(self, hashes, start=0):
        resident = self.match(hashes, start)
        return resident, self._view.match_active

    def acquire(self, seq, hashes, start, n):
        buffer, total = _hash_buffer(hashes)
        if start < 0 or n < 0 or start + n > total:
            check_span("BlockPool.acquire", total, start, n)
        status = lib.aisim_kv_acquire(self._pool, seq, buffer + start if start else buffer, n)
        if status:
            raise status_error(status, f"{self._label}.acquire(seq={seq})")

    # ---------------------------------------------------------- allocation

    def allocate(self, seq, k):
        if k < 0:
            check_count("BlockPool.allocate", "k", k)
        status = lib.aisim_kv_allocate(self._pool, seq, k)
        if status == NOSPACE:
            return False
        if status:
            raise status_error(status, f"{self._label}.allocate(seq={seq})")
        return True

    def acquire_allocate(self, seq, hashes, start, n, k):
        buffer, total = _hash_buffer(hashes)
        if start < 0 or n < 0 or start + n > total or k < 0:
            check_span("BlockPool.acquire_allocate", total, start, n)
            check_count("BlockPool.acquire_allocate", "k", k)
        status = lib.aisim_kv_acquire_allocate(
            self._pool, seq, buffer + start if start else buffer, n, k
        )
        if status == NOSPACE:
            return False
        if status:
            raise status_error(status, f"{self._label}.acquire_allocate(seq={seq})")
        return True

    def allocate_each(self, seqs, k_each=1):
        operation = "BlockPool.allocate_each"
        if k_each < 0:
            check_count(operation, "k_each", k_each)
        seqs, buffer = _handle_buffer(seqs)
        status = lib.aisim_kv_allocate_each(self._pool, buffer, len(seqs), k_each)
        if status == NOSPACE:
            return False
        if status == EBADSEQ:
            bad = next(seq for seq in seqs if lib.aisim_kv_seq_len(self._pool, seq) < 0)
            raise status_error(status, f"{self._named(operation)}(seq={bad})")
        if status:
            raise status_error(status, self._named(operation))
        return True

    # -------------------------------------------------------------- commit

    def commit(self, seq, hashes, first_block, count):
        operation = "BlockPool.commit"
        buffer, total = _hash_buffer(hashes)
        if first_block < 0 or count < 0 or first_block + count > total:
            check_span(operation, total, first_block, count)
        status = lib.aisim_kv_commit(
            self._pool, seq, buffer + first_block if first_block else buffer, first_block, count
        )
        if status == EINVAL:
            length = lib.aisim_kv_seq_len(self._pool, seq)
            raise status_error(
                status,
                f"{self._named(operation)}(seq={seq})",
                f"blocks [{first_block}, {first_block + count}) exceed the table of {length}",
            )
        if status:
            raise status_error(status, f"{self._named(operation)}(seq={seq})")

    # ------------------------------------------------------------- release

    def release(self, seq):
        status = lib.aisim_kv_release(self._pool, seq)
        if status:
            raise status_error(status, f"{self._label}.release(seq={seq})")

    # -------------------------------------------------------- eviction log

    def log_evictions(self, enabled):
        lib.aisim_kv_log_evictions(self._pool, bool(enabled))

    def take_evicted(self, absent_only=False):
        count = self._view.logged
        if not count:
            return array("Q")
        evicted = _ZERO_HASH * count
        kept = lib.aisim_kv_take_evicted(
            self._pool, absent_only, ffi.from_buffer(_U64_ARRAY, evicted), count
        )
        if kept < 0:
            raise status_error(kept, f"{self._label}.take_evicted")
        if kept < count:
            del evicted[kept:]
        return evicted

    def check(self):
        """Raise NativeError if counters, lists, index or references disagree."""
        status = lib.aisim_kv_check(self._pool)
        if status:
            raise status_error(status, f"{self._label}.check")

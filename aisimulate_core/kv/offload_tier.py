"""The block pool of one KV offload tier behind the GPU cache (FEATURES.md §5.2, §6).

A tier (the G2 host pool, the G3 storage pool) holds at most ``capacity`` entries keyed by a
block's sequence hash. An entry is *pending* (the store that writes it is in flight) or
*resident*; a resident entry may be pinned by the transfers reading it. The resident unpinned
entries form an LRU, oldest first; eviction takes from its head, never a pending or pinned
entry, never a key of the cohort being stored. A completed transfer gives its keys one shared
epoch: they join the LRU's tail in ascending hash order (the reference's ``(epoch, hash)``
order); a touch moves one key to the tail.

``offload_tier(capacity, backend=None)`` builds the C pool (csrc/offload_tier.c) or its Python
twin ``PyOffloadTier`` (``AISIMULATE_BACKEND`` decides); both give the same answers for every
sequence of operations (tests/test_offload_tier.py drives them side by side). Misuse (a key
present where it must be absent, in the wrong state, repeated) raises NativeArgumentError and
changes nothing.

States: ``ABSENT`` 0, ``PENDING`` 1, ``RESIDENT`` 2. Queries: ``capacity``, ``len()``,
``pending``, ``pinned``, ``evictions``, ``state(h) -> (state, pins)``, ``absent(hashes)``
(the indices of the absent ones, ascending), ``leading(hashes)``
(how many leading hashes are present), ``lru()``. Changes: ``touch(hashes, reverse=False)``,
``reserve(keys, protect=()) -> evicted list or None`` (None: not enough victims, nothing
changed), ``complete(keys, shared=True)``, ``pin(keys)``, ``unpin(keys, shared=True)``,
``discard(keys)`` (pending entries dropped), ``check()``.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict

from aisimulate_core.native import (ECORRUPT, EINVAL, NOSPACE, c_array, check_status, ffi,
                                    handle_view, lib, open_handle, resolve_backend,
                                    status_error)

ABSENT, PENDING, RESIDENT = 0, 1, 2


def _invalid(operation, detail):
    return status_error(EINVAL, f"OffloadTier.{operation}", detail)


def _distinct(operation, keys):
    if len(set(keys)) != len(keys):
        raise _invalid(operation, "a key is repeated")


def _u64s(keys):
    return keys if isinstance(keys, array) and keys.typecode == "Q" else array("Q", keys)


class PyOffloadTier:
    """The twin: a dict of ``[state, pins]`` per hash and an OrderedDict LRU."""

    __slots__ = ("capacity", "evictions", "pending", "pinned", "_entries", "_lru")
    backend = "python"

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise _invalid("new", f"capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.evictions = 0
        self.pending = 0
        self.pinned = 0
        self._entries: dict[int, list] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def state(self, h: int) -> tuple[int, int]:
        entry = self._entries.get(h)
        return (ABSENT, 0) if entry is None else (entry[0], entry[1])

    def absent(self, hashes) -> list[int]:
        entries = self._entries
        return [i for i, h in enumerate(hashes) if h not in entries]

    def leading(self, hashes) -> int:
        entries = self._entries
        n = 0
        for h in hashes:
            if h not in entries:
                break
            n += 1
        return n

    def touch(self, hashes, reverse: bool = False) -> int:
        entries, lru = self._entries, self._lru
        present = 0
        for h in (reversed(hashes) if reverse else hashes):
            if h in entries:
                present += 1
                if h in lru:
                    lru.move_to_end(h)
        return present

    def reserve(self, keys, protect=()):
        entries, lru = self._entries, self._lru
        for h in keys:
            if h in entries:
                raise _invalid("reserve", f"key {h} is present")
        _distinct("reserve", keys)
        need = len(keys) - (self.capacity - len(entries))
        victims = []
        if need > 0:
            guard = set(protect)
            for h in lru:
                if len(victims) == need:
                    break
                if h not in guard:
                    victims.append(h)
            if len(victims) < need:
                return None
            for h in victims:
                del lru[h]
                del entries[h]
            self.evictions += len(victims)
        for h in keys:
            entries[h] = [PENDING, 0]
        self.pending += len(keys)
        return victims

    def _check(self, operation, keys, want):
        _distinct(operation, keys)
        entries = self._entries
        for h in keys:
            entry = entries.get(h)
            if (entry is None or (want == PENDING and entry[0] != PENDING)
                    or (want != PENDING and entry[0] != RESIDENT)
                    or (want == "pinned" and entry[1] == 0)):
                raise _invalid(operation, f"key {h} is not {'pending' if want == PENDING else 'resident'}"
                               f"{' and pinned' if want == 'pinned' else ''}")

    def complete(self, keys, shared: bool = True) -> None:
        self._check("complete", keys, PENDING)
        entries, lru = self._entries, self._lru
        for h in (sorted(keys) if shared else keys):
            entries[h][0] = RESIDENT
            lru[h] = None
        self.pending -= len(keys)

    def pin(self, keys) -> None:
        self._check("pin", keys, RESIDENT)
        entries, lru = self._entries, self._lru
        for h in keys:
            entry = entries[h]
            if entry[1] == 0:
                del lru[h]
                self.pinned += 1
            entry[1] += 1

    def unpin(self, keys, shared: bool = True) -> None:
        self._check("unpin", keys, "pinned")
        entries, lru = self._entries, self._lru
        for h in (sorted(keys) if shared else keys):
            entry = entries[h]
            entry[1] -= 1
            if entry[1] == 0:
                self.pinned -= 1
                lru[h] = None

    def discard(self, keys) -> None:
        self._check("discard", keys, PENDING)
        for h in keys:
            del self._entries[h]
        self.pending -= len(keys)

    def lru(self) -> list:
        return list(self._lru)

    def check(self) -> None:
        entries, lru = self._entries, self._lru
        ok = (len(entries) <= self.capacity
              and sum(e[0] == PENDING for e in entries.values()) == self.pending
              and sum(e[0] == RESIDENT and e[1] > 0 for e in entries.values()) == self.pinned
              and all(h in entries and entries[h][0] == RESIDENT and entries[h][1] == 0
                      for h in lru)
              and len(lru) == len(entries) - self.pending - self.pinned)
        if not ok:
            raise status_error(ECORRUPT, "OffloadTier.check")


class COffloadTier:
    """The C pool (csrc/offload_tier.c)."""

    __slots__ = ("_t", "_view", "_pins")
    backend = "c"

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise _invalid("new", f"capacity must be positive, got {capacity}")
        self._t = open_handle("aisim_offload_tier", lib.aisim_ot_new, lib.aisim_ot_free,
                              "OffloadTier.new", capacity)
        self._view = handle_view(self._t, "aisim_ot_view", lib.aisim_ot_view_of)
        self._pins = ffi.new("int64_t *")

    capacity = property(lambda self: self._view.capacity)
    evictions = property(lambda self: self._view.evictions)
    pending = property(lambda self: self._view.pending)
    pinned = property(lambda self: self._view.pinned)

    def __len__(self) -> int:
        return self._view.entries

    def state(self, h: int) -> tuple[int, int]:
        state = lib.aisim_ot_state(self._t, h, self._pins)
        return state, self._pins[0]

    def absent(self, hashes) -> list[int]:
        keys = _u64s(hashes)
        out = ffi.new("int64_t[]", max(len(keys), 1))
        n = check_status(lib.aisim_ot_absent(self._t, ffi.from_buffer("uint64_t[]", keys),
                                             len(keys), out), "OffloadTier.absent")
        return ffi.unpack(out, n)

    def leading(self, hashes) -> int:
        keys = _u64s(hashes)
        return check_status(lib.aisim_ot_leading(self._t, ffi.from_buffer("uint64_t[]", keys),
                                                 len(keys)), "OffloadTier.leading")

    def touch(self, hashes, reverse: bool = False) -> int:
        keys = _u64s(hashes)
        return check_status(lib.aisim_ot_touch(self._t, ffi.from_buffer("uint64_t[]", keys),
                                               len(keys), int(reverse)), "OffloadTier.touch")

    def reserve(self, keys, protect=()):
        keys, guard = _u64s(keys), _u64s(protect)
        evicted = ffi.new("uint64_t[]", max(len(keys), 1))
        count = ffi.new("int64_t *")
        status = lib.aisim_ot_reserve(self._t, ffi.from_buffer("uint64_t[]", keys), len(keys),
                                      ffi.from_buffer("uint64_t[]", guard), len(guard),
                                      evicted, count)
        if status == NOSPACE:
            return None
        if status == EINVAL:
            raise _invalid("reserve", "a key is present or repeated")
        check_status(status, "OffloadTier.reserve")
        return list(c_array("Q", evicted, count[0]))

    def _call(self, operation, fn, keys, *extra):
        keys = _u64s(keys)
        status = fn(self._t, ffi.from_buffer("uint64_t[]", keys), len(keys), *extra)
        if status == EINVAL:
            raise _invalid(operation, "a key is missing, in the wrong state or repeated")
        check_status(status, f"OffloadTier.{operation}")

    def complete(self, keys, shared: bool = True) -> None:
        self._call("complete", lib.aisim_ot_complete, keys, int(shared))

    def pin(self, keys) -> None:
        self._call("pin", lib.aisim_ot_pin, keys)

    def unpin(self, keys, shared: bool = True) -> None:
        self._call("unpin", lib.aisim_ot_unpin, keys, int(shared))

    def discard(self, keys) -> None:
        self._call("discard", lib.aisim_ot_discard, keys)

    def lru(self) -> list:
        n = check_status(lib.aisim_ot_lru(self._t, ffi.NULL, 0), "OffloadTier.lru")
        out = ffi.new("uint64_t[]", max(n, 1))
        lib.aisim_ot_lru(self._t, out, n)
        return list(c_array("Q", out, n))

    def check(self) -> None:
        check_status(lib.aisim_ot_check(self._t), "OffloadTier.check")


def offload_tier(capacity: int, backend: str | None = None):
    """The tier pool ``AISIMULATE_BACKEND`` (or ``backend``) selects."""
    if resolve_backend(backend) == "c":
        return COffloadTier(capacity)
    return PyOffloadTier(capacity)

"""A multiset of 64-bit block hashes with whole-chain updates, for router indexes.

A KV-aware router keeps, per scheduler, the blocks its placed requests hold (a count per hash:
shared prefixes are held by several requests) and the blocks the scheduler is known to cache (a
set). Prompts have hundreds of blocks, and every placement and terminal updates a whole chain,
so the C map (csrc/hash_counts.c) does each update in one call; ``PyHashCounts`` is its twin, a
dict, with the same answers for every sequence of operations. ``hash_counts(backend=None)``
builds the one ``AISIMULATE_BACKEND`` selects.

Chain operations rely on what sequence hashes guarantee: the hashes a union of whole chains
holds of any one chain are a prefix of it, with counts not increasing along it, so binary
searches find the ends. An operation whose input breaks that (a hash it must read is absent, a
hash to remove listed twice) raises ``NativeArgumentError`` and changes nothing.
"""

from __future__ import annotations

from array import array
from typing import Iterator, Sequence

from aisimulate_core.native import (EINVAL, ffi, handle_view, lib, open_handle, resolve_backend,
                                    status_error)

_U64_ARRAY = ffi.typeof("uint64_t[]") if ffi is not None else None
_U32_ARRAY = ffi.typeof("uint32_t[]") if ffi is not None else None


def _broken(operation):
    return status_error(EINVAL, f"HashCounts.{operation}",
                        "the hashes are not a chain of the ones held")


class PyHashCounts:
    """The twin: a dict from hash to count."""

    __slots__ = ("_counts",)
    backend = "python"

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, h: int) -> bool:
        return h in self._counts

    def __getitem__(self, h: int) -> int:
        return self._counts[h]

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._counts))

    def items(self) -> list:
        return list(self._counts.items())

    def intern(self, raw: array) -> array:
        """Dense ids of the u64s ``raw`` in first-seen order (this call's and earlier ones'):
        an id new to the map is inserted with the number of ids before it as its count."""
        intern = self._counts.setdefault
        counts = self._counts
        # len(counts) is read before each insertion: a new id gets the next dense value
        return array("I", [intern(h, len(counts)) for h in raw])

    def held_prefix(self, hashes: Sequence[int]) -> int:
        counts = self._counts
        low, high = 0, len(hashes)
        while low < high:
            middle = (low + high) // 2
            if hashes[middle] in counts:
                low = middle + 1
            else:
                high = middle
        return low

    def add_chain(self, hashes: Sequence[int]) -> None:
        counts = self._counts
        held = self.held_prefix(hashes)
        shared = hashes[:held]
        if not all(map(counts.__contains__, shared)):
            raise _broken("add_chain")
        # every new count is read before any is written, as the C map does
        counts.update(zip(shared, [counts[h] + 1 for h in shared]))
        counts.update(dict.fromkeys(hashes[held:], 1))

    def drop_chain(self, hashes: Sequence[int]) -> None:
        counts = self._counts
        low, high = 0, len(hashes)
        while low < high:
            middle = (low + high) // 2
            count = counts.get(hashes[middle])
            if count is None:
                raise _broken("drop_chain")
            if count > 1:
                low = middle + 1
            else:
                high = middle
        shared, tail = hashes[:low], hashes[low:]
        if (not all(map(counts.__contains__, shared)) or not all(map(counts.__contains__, tail))
                or len(set(tail)) != len(tail)):
            raise _broken("drop_chain")
        counts.update(zip(shared, [counts[h] - 1 for h in shared]))
        for h in tail:
            del counts[h]

    def insert_all(self, hashes: Sequence[int]) -> None:
        counts = self._counts
        for h in hashes:
            counts.setdefault(h, 1)

    def remove_all(self, hashes: Sequence[int]) -> None:
        pop = self._counts.pop
        for h in hashes:
            pop(h, None)

    def leading(self, hashes: Sequence[int], start: int = 0, stop: int | None = None) -> int:
        counts = self._counts
        matched = 0
        for h in hashes[start:stop]:
            if h not in counts:
                break
            matched += 1
        return matched

    def leading_absent(self, hashes: Sequence[int], start: int = 0,
                       stop: int | None = None) -> int:
        counts = self._counts
        missed = 0
        for h in hashes[start:stop]:
            if h in counts:
                break
            missed += 1
        return missed


def _buffer(hashes, operation):
    if type(hashes) is not array or hashes.typecode != "Q":
        try:
            hashes = array("Q", hashes)
        except (OverflowError, TypeError) as exc:
            raise status_error(EINVAL, f"HashCounts.{operation}",
                               f"hashes must be u64 integers ({exc})") from None
    return ffi.from_buffer(_U64_ARRAY, hashes), len(hashes)


class CHashCounts:
    """The map in C; its size is read from the view struct the C side keeps current."""

    __slots__ = ("_map", "_view")
    backend = "c"

    def __init__(self) -> None:
        self._map = open_handle("aisim_hash_counts", lib.aisim_hc_new, lib.aisim_hc_free,
                                "HashCounts")
        self._view = handle_view(self._map, "aisim_hc_view", lib.aisim_hc_view_of)

    def __len__(self) -> int:
        return self._view.len

    def __bool__(self) -> bool:
        return self._view.len > 0

    def _get(self, h):
        out = ffi.new("int64_t *")
        try:
            found = lib.aisim_hc_get(self._map, h, out)
        except OverflowError:   # not a u64: never held
            return None
        return out[0] if found == 1 else None

    def __contains__(self, h: int) -> bool:
        return self._get(h) is not None

    def __getitem__(self, h: int) -> int:
        count = self._get(h)
        if count is None:
            raise KeyError(h)
        return count

    def items(self) -> list:
        n = self._view.len
        keys, counts = ffi.new("uint64_t[]", n), ffi.new("int64_t[]", n)
        got = lib.aisim_hc_items(self._map, keys, counts, n)
        return list(zip(keys[0:got], counts[0:got]))

    def __iter__(self) -> Iterator[int]:
        return iter([key for key, _ in self.items()])

    def _call(self, function, operation, hashes, start=0, stop=None):
        buffer, n = _buffer(hashes, operation)
        if stop is not None and stop < n:
            n = max(stop, 0)
        if start:
            start = min(start, n)
            buffer += start
            n -= start
        status = function(self._map, buffer, n)
        if status < 0:
            if status == EINVAL:
                raise _broken(operation)
            raise status_error(status, f"HashCounts.{operation}")
        return status

    def intern(self, raw: array) -> array:
        """PyHashCounts.intern in one C call (``raw``: an array of typecode Q)."""
        out = array("I", bytes(4 * len(raw)))
        status = lib.aisim_hc_intern(self._map, ffi.from_buffer(_U64_ARRAY, raw), len(raw),
                                     ffi.from_buffer(_U32_ARRAY, out))
        if status < 0:
            raise status_error(status, "HashCounts.intern")
        return out

    def held_prefix(self, hashes: Sequence[int]) -> int:
        return self._call(lib.aisim_hc_held_prefix, "held_prefix", hashes)

    def add_chain(self, hashes: Sequence[int]) -> None:
        self._call(lib.aisim_hc_add_chain, "add_chain", hashes)

    def drop_chain(self, hashes: Sequence[int]) -> None:
        self._call(lib.aisim_hc_drop_chain, "drop_chain", hashes)

    def insert_all(self, hashes: Sequence[int]) -> None:
        self._call(lib.aisim_hc_insert_all, "insert_all", hashes)

    def remove_all(self, hashes: Sequence[int]) -> None:
        self._call(lib.aisim_hc_remove_all, "remove_all", hashes)

    def leading(self, hashes: Sequence[int], start: int = 0, stop: int | None = None) -> int:
        """How many of ``hashes[start:stop]`` are present, up to the first absent one."""
        return self._call(lib.aisim_hc_leading, "leading", hashes, start, stop)

    def leading_absent(self, hashes: Sequence[int], start: int = 0,
                       stop: int | None = None) -> int:
        """How many of ``hashes[start:stop]`` are absent, up to the first present one."""
        return self._call(lib.aisim_hc_leading_absent, "leading_absent", hashes, start, stop)


def hash_counts(backend=None):
    """An empty multiset of the selected backend."""
    return CHashCounts() if resolve_backend(backend) == "c" else PyHashCounts()

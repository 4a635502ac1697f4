"""What the ``kv_router`` knows per scheduler: the blocks it is known to hold (the index, fed by
the engines' KV events, optionally late), and the load of the requests placed on it.

The index is a set of block sequence hashes per scheduler. A block's sequence hash depends on
every block before it, so "the longest prefix of the request's chain present in the set" is the
match length of the reference's radix tree over block chains (CLUSTER.md §2.5).
"""

from __future__ import annotations

from collections import deque
from itertools import repeat
from operator import add, sub
from typing import Sequence

SchedulerKey = tuple  # (worker_id, dp_rank)


class SchedulerState:
    """One scheduler's index and load (CLUSTER.md §2.6):

    * ``cached``: hashes stored and not removed, as the router has seen the events;
    * ``prefill_tokens`` (P): the uncached prompt tokens of placed requests still in prefill;
    * ``active`` / ``fresh_blocks`` (D): the full prompt blocks of the placed requests not yet
      finished, refcounted by hash when the router assumes KV reuse, else a plain count;
    * ``requests`` (A): the placed requests not yet finished.
    """

    __slots__ = ("cached", "prefill_tokens", "active", "fresh_blocks", "requests")

    def __init__(self) -> None:
        self.cached: set[int] = set()
        self.prefill_tokens = 0
        self.active: dict[int, int] = {}
        self.fresh_blocks = 0
        self.requests = 0

    def overlap(self, hashes: Sequence[int]) -> int:
        """Length of the longest prefix of ``hashes`` this scheduler is known to hold."""
        cached = self.cached
        matched = 0
        for block in hashes:
            if block not in cached:
                break
            matched += 1
        return matched

    def new_blocks(self, hashes: Sequence[int]) -> int:
        """N: how many of ``hashes`` are not in the active set yet."""
        return len(hashes) - self._held_prefix(hashes)

    def _held_prefix(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` the active set holds.

        The active set is a union of whole chains (a placed request adds all its blocks) and a
        sequence hash names its whole prefix, so the blocks of ``hashes`` it holds are a prefix
        of them, and their refcounts do not increase along the chain: binary searches find the
        ends, and the updates loop in C (map over dict methods) on slices, not per block in
        Python (a prompt has hundreds of blocks)."""
        active = self.active
        low, high = 0, len(hashes)
        while low < high:
            middle = (low + high) // 2
            if hashes[middle] in active:
                low = middle + 1
            else:
                high = middle
        return low

    def add_active(self, hashes: Sequence[int]) -> None:
        active = self.active
        held = self._held_prefix(hashes)
        shared = hashes[:held]
        active.update(zip(shared, list(map(add, map(active.__getitem__, shared), repeat(1)))))
        active.update(dict.fromkeys(hashes[held:], 1))

    def drop_active(self, hashes: Sequence[int]) -> None:
        # blocks only this request holds (refcount 1) are the tail of its chain
        active = self.active
        low, high = 0, len(hashes)
        while low < high:
            middle = (low + high) // 2
            if active[hashes[middle]] > 1:
                low = middle + 1
            else:
                high = middle
        shared = hashes[:low]
        active.update(zip(shared, list(map(sub, map(active.__getitem__, shared), repeat(1)))))
        deque(map(active.__delitem__, hashes[low:]), maxlen=0)


class LaggedEvents:
    """KV events held back by ``kv_event_lag_ms``: an event of time t is applied at t + lag,
    before any decision at that time; events keep their arrival order."""

    __slots__ = ("lag", "_pending")

    def __init__(self, lag: float) -> None:
        self.lag = lag
        self._pending: deque = deque()

    def __bool__(self) -> bool:
        return bool(self._pending)

    def add(self, key: SchedulerKey, stored: bool, hashes: Sequence[int], now_ms: float) -> None:
        # the caller's sequence may be a buffer the runtime reuses: keep a copy
        self._pending.append((now_ms + self.lag, key, stored, tuple(hashes)))

    def due(self, now_ms: float):
        """Pop and yield ``(key, stored, hashes)`` of every event due at ``now_ms``."""
        pending = self._pending
        while pending and pending[0][0] <= now_ms:
            _, key, stored, hashes = pending.popleft()
            yield key, stored, hashes

    def forget(self, keys: set) -> None:
        """Drop the held events of removed schedulers."""
        self._pending = deque(event for event in self._pending if event[1] not in keys)

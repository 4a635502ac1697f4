"""What the ``kv_router`` knows per scheduler: the blocks it is known to hold (the index, fed by
the engines' KV events, optionally late), and the load of the requests placed on it.

The index is a set of block sequence hashes per scheduler. A block's sequence hash depends on
every block before it, so "the longest prefix of the request's chain present in the set" is the
match length of the reference's radix tree over block chains (CLUSTER.md §2.5).
"""

from __future__ import annotations

from array import array
from collections import deque
from typing import Sequence

from aisimulate_core.kv.hash_counts import hash_counts

SchedulerKey = tuple  # (worker_id, dp_rank)


class SchedulerState:
    """One scheduler's index and load (CLUSTER.md §2.6):

    * ``cached``: hashes stored and not removed, as the router has seen the events;
    * ``prefill_tokens`` (P): the uncached prompt tokens of placed requests still in prefill;
    * ``active`` / ``fresh_blocks`` (D): the full prompt blocks of the placed requests not yet
      finished, refcounted by hash when the router assumes KV reuse, else a plain count;
    * ``requests`` (A): the placed requests not yet finished.

    ``cached`` and ``active`` are the core's hash multisets (aisimulate_core.kv.hash_counts):
    a prompt's chain of hundreds of blocks is one C call per update.
    """

    __slots__ = ("cached", "prefill_tokens", "active", "fresh_blocks", "requests")

    def __init__(self) -> None:
        self.cached = hash_counts()
        self.prefill_tokens = 0
        self.active = hash_counts()
        self.fresh_blocks = 0
        self.requests = 0

    def overlap(self, hashes: Sequence[int]) -> int:
        """Length of the longest prefix of ``hashes`` this scheduler is known to hold."""
        return self.cached.leading(hashes)

    def new_blocks(self, hashes: Sequence[int]) -> int:
        """N: how many of ``hashes`` are not in the active set yet (the active set is a union
        of whole chains, so the ones it holds are a prefix of ``hashes``)."""
        return len(hashes) - self.active.held_prefix(hashes)

    def add_active(self, hashes: Sequence[int]) -> None:
        self.active.add_chain(hashes)

    def drop_active(self, hashes: Sequence[int]) -> None:
        # blocks only this request holds (refcount 1) are the tail of its chain
        self.active.drop_chain(hashes)


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
        self._pending.append((now_ms + self.lag, key, stored, array("Q", hashes)))

    def due(self, now_ms: float):
        """Pop and yield ``(key, stored, hashes)`` of every event due at ``now_ms``."""
        pending = self._pending
        while pending and pending[0][0] <= now_ms:
            _, key, stored, hashes = pending.popleft()
            yield key, stored, hashes

    def forget(self, keys: set) -> None:
        """Drop the held events of removed schedulers."""
        self._pending = deque(event for event in self._pending if event[1] not in keys)

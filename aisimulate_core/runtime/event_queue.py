"""The simulation's event queue: a min-heap keyed ``(time_ms, insertion order)``.

Events that share a time pop in the order they were pushed. An event is the
triple ``(time_ms, kind, ident)``; ``kind`` must fit an int32 and ``ident`` an
int64 (the C backend raises OverflowError otherwise).

``EventQueue()`` builds the backend chosen by ``aisimulate_core.native``;
``EventQueue(backend="python")`` or ``"c"`` forces one. ``LoopQueue`` is the simulation
loop's own: the same order on a heap list the loop reads without a call.
"""

import math
from heapq import heappop, heappush
from itertools import count

from aisimulate_core.native import EINVAL, ffi, lib, resolve_backend, status_error

_EMPTY_POP = "EventQueue.pop: the queue is empty"


class EventQueue:
    """Factory and common type of both queue implementations."""

    __slots__ = ()
    backend = None

    def __new__(cls, backend=None, initial_capacity=1024):
        if cls is EventQueue:
            cls = CEventQueue if resolve_backend(backend) == "c" else PyEventQueue
        return object.__new__(cls)


class CEventQueue(EventQueue):
    """The queue in C; the view struct makes ``len`` and ``peek_time`` field reads."""

    __slots__ = ("_handle", "_view", "_push", "_pop")
    backend = "c"

    def __init__(self, backend=None, initial_capacity=1024):
        box = ffi.new("aisim_event_queue **")
        status = lib.aisim_eq_new(box, initial_capacity)
        if status:
            raise status_error(status, "EventQueue()")
        self._handle = ffi.gc(box[0], lib.aisim_eq_free)
        view = ffi.new("aisim_eq_view **")
        lib.aisim_eq_view_of(self._handle, view)
        self._view = view[0]
        self._push = lib.aisim_eq_push
        self._pop = lib.aisim_eq_pop

    def push(self, time_ms, kind, ident):
        if self._push(self._handle, time_ms, kind, ident):
            raise _push_error(time_ms)

    def pop(self):
        if self._pop(self._handle):
            raise IndexError(_EMPTY_POP)
        view = self._view
        return (view.popped_time_ms, view.popped_kind, view.popped_ident)

    def peek_time(self):
        return self._view.head_time_ms

    def __len__(self):
        return self._view.len


class PyEventQueue(EventQueue):
    """The twin on heapq; the counter breaks ties so kinds are never compared."""

    __slots__ = ("_heap", "_order")
    backend = "python"

    def __init__(self, backend=None, initial_capacity=1024):
        self._heap = []
        self._order = count()

    def push(self, time_ms, kind, ident):
        time_ms = float(time_ms)
        if time_ms != time_ms:
            raise _push_error(time_ms)
        heappush(self._heap, (time_ms, next(self._order), kind, ident))

    def pop(self):
        if not self._heap:
            raise IndexError(_EMPTY_POP)
        time_ms, _, kind, ident = heappop(self._heap)
        return (time_ms, kind, ident)

    def peek_time(self):
        heap = self._heap
        return heap[0][0] if heap else math.inf

    def __len__(self):
        return len(self._heap)


class LoopQueue:
    """The aggregated loop's queue: ``EventQueue``'s interface and order, on a heapq list
    ``heap`` of ``(time_ms, order, kind, ident)`` over a sentinel that is never due, so that
    the loop reads the next time as ``heap[0][0]`` and pops with ``heappop(heap)`` (no call
    into a queue object per event)."""

    __slots__ = ("heap", "_order")
    backend = "python"

    def __init__(self):
        self.heap = [(math.inf, math.inf, 0, 0)]
        self._order = count()

    def push(self, time_ms, kind, ident):
        time_ms = float(time_ms)
        if time_ms != time_ms:
            raise _push_error(time_ms)
        heappush(self.heap, (time_ms, next(self._order), kind, ident))

    def pop(self):
        if len(self.heap) == 1:
            raise IndexError(_EMPTY_POP)
        time_ms, _, kind, ident = heappop(self.heap)
        return (time_ms, kind, ident)

    def peek_time(self):
        return self.heap[0][0]

    def __len__(self):
        return len(self.heap) - 1


def _push_error(time_ms):
    return status_error(EINVAL, "EventQueue.push", f"time_ms must be a number, got {time_ms!r}")

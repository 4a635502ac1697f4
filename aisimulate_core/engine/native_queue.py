"""The running and waiting queues of a C rank as the runtime reads a rank's lists.

Length and truth are a field read of the rank's view (``n_running`` / ``n_waiting``: the loop
asks every step); iterating copies the slots out of C (messages and checks only) and each
engine says what a slot stands for (``_request``)."""

from __future__ import annotations

from .. import native

RUNNING, WAITING = 0, 1


class QueueView:
    __slots__ = ("_rank", "_which")
    QUEUE = ""               # the C call that copies the queue's slots out

    def __init__(self, rank, which):
        self._rank = rank
        self._which = which

    def __len__(self):
        view = self._rank._view
        return view.n_running if self._which == RUNNING else view.n_waiting

    def __bool__(self):
        view = self._rank._view   # (not through len())
        return (view.n_running if self._which == RUNNING else view.n_waiting) > 0

    def _slots(self):
        n = len(self)
        out = native.ffi.new("int32_t[]", max(n, 1))
        native.check_status(getattr(native.lib, self.QUEUE)(self._rank._rank, self._which, out, n),
                            self.QUEUE)
        return native.ffi.unpack(out, n)

    def __iter__(self):
        request = self._request
        return iter([request(slot) for slot in self._slots()])

    def __getitem__(self, index):
        return list(self)[index]

    def _request(self, slot):
        raise NotImplementedError

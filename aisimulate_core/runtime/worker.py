"""A logical worker: ``dp_size`` attention ranks that run their passes in lockstep (SEMANTICS 2.8).

Each rank with work forms its own pass; the grouped pass ends at the slowest rank's end and
every rank's tokens become visible then, so an idle rank cannot start early either.
"""

from __future__ import annotations


class Worker:
    __slots__ = ("idx", "ranks", "busy", "_active", "pass_end_ms", "generation")

    def __init__(self, idx, ranks):
        self.idx = idx
        self.ranks = ranks
        self.busy = False
        self._active = ()
        self.pass_end_ms = 0.0
        self.generation = 0

    def has_work(self):
        for rank in self.ranks:
            if rank.running or rank.waiting:
                return True
        return False

    def start_pass(self, now_ms):
        """Start a grouped pass; returns its end time, or None when no rank has work."""
        if len(self.ranks) == 1:
            rank = self.ranks[0]
            end = rank.schedule(now_ms)
            if end is None:
                return None
            self._active = self.ranks
        else:
            end = None
            active = []
            for rank in self.ranks:
                rank_end = rank.schedule(now_ms)
                if rank_end is not None:
                    active.append(rank)
                    if end is None or rank_end > end:
                        end = rank_end
            if not active:
                return None
            for rank in active:
                rank.pass_end_ms = end   # every rank's tokens become visible at the group end
            self._active = active
        self.busy = True
        self.pass_end_ms = end
        return end

    def complete_pass(self):
        self.busy = False
        for rank in self._active:
            rank.complete()
        self._active = ()

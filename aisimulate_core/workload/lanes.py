"""Agentic lanes (FEATURES.md 3): plays replayed ``L`` at a time, from one queue in play order.

At t = 0 the first ``min(L, plays)`` plays start, one per lane; afterwards whichever lane frees
first takes the next play (a work queue, not ``play_index mod L``). A play starting at lane time
T is shifted by ``T - min(not_before_ms over its roots)``: every node's ``not_before_ms`` moves by
that amount (never below T), dependency delays do not. A lane frees when its play is decided
(all nodes completed, or failed with every dispatched node terminal; a disaggregated source
still held does not keep it, though the play settles only when it is released); the next play
starts then.

Plays that settle at one instant free their lanes in the order the reference hears them: by
lifecycle round, then by the graph index of the node whose terminal decided the play (the
order of its lifecycle transcript). So settlements are held until the driver is next asked for
work.
"""

from __future__ import annotations


class Lanes:
    """The lane of each started play and the queue of plays still to start."""

    __slots__ = ("count", "lane_of_play", "_next", "_plays", "_held", "_started_by")

    def __init__(self, count, plays):
        self.count = count
        self._plays = plays                   # play count; plays start in index order
        self.lane_of_play = [None] * plays
        self._next = 0
        self._held = []                       # (round, deciding node, play, at_ms)
        self._started_by = {}                 # play -> the node whose terminal started it

    def initial(self):
        """``(play, lane)`` of the plays that start at 0."""
        return [self._take(lane) for lane in range(min(self.count, self._plays))]

    def _take(self, lane):
        play = self._next
        self._next += 1
        self.lane_of_play[play] = lane
        return play, lane

    def settled(self, round_ordinal, node, play, at_ms):
        self._held.append((round_ordinal, node, play, at_ms))

    def due(self):
        """``(play, lane, at_ms)`` of the plays the held settlements start, in order."""
        held = self._held
        if not held:
            return ()
        held.sort()
        out = []
        for _, node, play, at_ms in held:
            if self._next < self._plays:
                started, lane = self._take(self.lane_of_play[play])
                self._started_by[started] = node
                out.append((started, lane, at_ms))
        held.clear()
        return out

    def started_by(self, play):
        """The nodes a play's start waited for: the one whose terminal freed its lane."""
        node = self._started_by.get(play)
        return frozenset() if node is None else frozenset((node,))

    @staticmethod
    def lane_id(lane):
        return f"lane:{lane}"


__all__ = ["Lanes"]

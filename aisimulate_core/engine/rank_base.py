"""What every engine rank shares: the pass history that token times and ITL derive from.

A rank numbers its passes 0, 1, 2, ... and keeps each pass's end time. A request records the
runs of consecutive passes in which it emitted one token each as ``stretches``; from these, a
finished request's token times and its inter-token gaps follow without per-token lists.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right

from ..token_stats import TokenGaps


class RankBase:
    """Pass history and ITL bookkeeping; engines subclass it and call the ``_pass_*`` helpers."""

    # JSON path of the rank's settings, for stall messages (``$.spec.engine.rank``); the
    # runtime sets it where it knows it, messages name no path otherwise
    config_path = None
    # the pass just formed would change something even if it took no time
    pass_effect = False
    # the pass just formed repeats the previous one with no effect, and so will every next one
    # (a rank that detects such a fixed point sets it; ``stuck_error`` explains it)
    stuck = False
    # end times of the passes of an extended pass (its decode-only run), None for one pass
    _macro_ends = None
    # what the rank can do (engine/rank.py: Rank), read when a worker or router is built,
    # never per pass; an engine states what it adds (engine/vllm.py, engine/sglang.py)
    extends = False          # no extend (ExtendableRank; truncate is below)
    joins_groups = False     # no join_group/finish_round (GroupedRank)
    indexes_prefix = False   # no indexed_prefix (IndexedRank)
    psi = None               # no prefill_schedule_interval gate (engine/vllm_psi.py)
    tier_split = None        # no KV offload tiers (engine/vllm_offload.py sets its own)

    def truncate(self, arrival_ms, started=False):
        """A request arrived during extended passes: stop after the pass in flight at
        ``arrival_ms`` so that the request joins the next one. Returns the new end time.
        ``started``: the passes starting at ``arrival_ms`` have started already (the request
        arrives in a later round of that instant), so a pass ending exactly then does not
        take it: the run stops at the end of the pass starting then."""
        ends = self._macro_ends
        if ends is None:
            return self.pass_end_ms
        i = (bisect_right if started else bisect_left)(ends, arrival_ms)
        if i < len(ends) - 1:
            if i == 0:
                self._macro_ends = None
            else:
                del ends[i + 1:]
            self._run_cut()
            self.pass_end_ms = ends[i]
        return self.pass_end_ms

    def _run_cut(self):
        """The extended pass was shortened (an engine that tracks the run's last pass hears)."""

    def ends_pass_at(self, t_ms):
        """Whether a pass before the last one of an extended pass ends exactly at ``t_ms``."""
        ends = self._macro_ends
        if ends is None or t_ms >= ends[-1]:
            return False
        return ends[bisect_left(ends, t_ms)] == t_ms

    def holds_kv(self):
        """Whether KV is held here for a request outside the queues (disaggregated roles: a
        held source, a reserved destination): a draining worker is not empty yet."""
        return False

    def progressed(self):
        """Whether the pass just formed changed state (read only for zero-time passes)."""
        return self.pass_effect

    def stuck_error(self, now_ms):
        raise NotImplementedError

    def kv_summary(self):
        """How much KV is free, for a livelock message."""
        return "KV use unknown"

    def _init_pass_history(self):
        self.pass_index = 0
        self.pass_ends = array("d")
        self.itl_diff = array("q")   # difference array of gap multiplicities, per pass
        # gaps across a break between two stretches (preemption, a starved pass, prefill-only
        # passes): (last pass before, first pass after) -> finished requests with that break;
        # many decoders share the same break, so they are counted per pass pair
        self.break_gaps = {}

    def _pass_done(self, end_ms):
        """Close the current pass at ``end_ms``; returns its index."""
        P = self.pass_index
        self.pass_ends.append(end_ms)
        self.itl_diff.append(0)
        self.pass_index = P + 1
        return P

    @staticmethod
    def _emit(request, P):
        """Record that ``request`` emitted one token in pass ``P`` (for engines without open
        stretches): extends its last stretch when contiguous."""
        stretches = request.stretches
        if stretches and stretches[-1][1] == P - 1:
            stretches[-1] = (stretches[-1][0], P)
        else:
            stretches.append((P, P))

    def _record_itl(self, r):
        """Add a finished request's inter-token gaps: stretches via the difference array."""
        self._add_stretch_gaps(r.stretches)

    def _add_stretch_gaps(self, stretches):
        diff = self.itl_diff
        breaks = self.break_gaps
        prev_last = None
        for first, last in stretches:
            if last > first:
                diff[first] += 1
                diff[last] -= 1
            if prev_last is not None:
                key = (prev_last, first)
                breaks[key] = breaks.get(key, 0) + 1
            prev_last = last

    def itl_gaps(self, backend=None):
        """(gap values, multiplicities) of every recorded sample gap on this rank, as arrays
        ``'d'`` and ``'q'``, one entry per distinct gap in first-seen order: the consecutive
        passes' gaps, then the break gaps. NaN and +inf gaps are left out and negative ones
        count as 0.0, as the report takes them. One ``TokenGaps`` call reads the whole pass
        history (in C on the C backend), so no Python object is made per pass."""
        gaps = TokenGaps(backend)
        gaps.add_passes(*self.gap_history())
        return gaps.gaps()

    def add_gaps_to(self, collector):
        """Its token gaps into the report's (``Collector.add_pass_gaps``): what ``itl_gaps``
        gives, without a histogram of its own (the same entries in the same first-seen order,
        so the same summary)."""
        collector.add_pass_gaps(*self.gap_history())

    def gap_history(self):
        """(pass ends, gap multiplicity differences, break gaps): what the gaps are read from."""
        return self.pass_ends, self.itl_diff, self.break_gaps

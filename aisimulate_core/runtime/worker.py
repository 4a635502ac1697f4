"""A logical worker: ``dp_size`` attention ranks that run their passes in lockstep (SEMANTICS 2.8).

Each rank with work forms its own pass; the grouped pass ends at the slowest rank's end and
every rank's tokens become visible then, so an idle rank cannot start early either.

SGLang ranks also share a round signal (prefill_decode_interval, new_token_ratio reset): after
a grouped pass every rank, idle ones included, hears whether any rank prefilled or ran a forward.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from ..engine import fpm
from ..engine.rank_base import RankBase
from ..engine.request import request_name


class Worker:
    __slots__ = ("idx", "worker_id", "ranks", "busy", "_active", "pass_end_ms", "generation",
                 "extendable", "_round_ranks", "_pass_start", "_lone", "_plain_truncate",
                 "wave", "_cadence", "_start_run")

    def __init__(self, idx, ranks, worker_id=None):
        self.idx = idx                # the simulation's key for this worker
        self.worker_id = idx if worker_id is None else worker_id   # its id within its pool
        self.ranks = ranks
        self.busy = False
        self._active = ()
        self._pass_start = 0.0
        self.pass_end_ms = 0.0
        self.generation = 0
        # the rank of a worker without attention DP (the common case: no group to form)
        self._lone = ranks[0] if len(ranks) == 1 else None
        # a lone rank that can run decode-only passes as one event
        self.extendable = len(ranks) == 1 and ranks[0].extends
        self._plain_truncate = self.extendable and type(ranks[0]).truncate is RankBase.truncate
        # ranks that take the group's round signal (a lone rank signals itself)
        self._round_ranks = [r for r in ranks if r.joins_groups] if len(ranks) > 1 else []
        for rank in self._round_ranks:
            rank.join_group(len(ranks))
        # vLLM's prefill_schedule_interval (engine/vllm_psi.py): the grouped passes since the
        # worker was last drained, told to the ranks' gates before each pass
        self.wave = 0
        self._cadence = [rank.psi for rank in ranks
                         if rank.psi is not None] if len(ranks) > 1 else []
        # the lone rank's fused schedule-and-extend (a C SGLang rank's ``schedule_extended``),
        # bound at its first pass (False: it has none): a rank that formed one holds requests,
        # so it keeps its class (a C rank becomes its Python twin only before it takes any)
        self._start_run = None

    def has_work(self):
        for rank in self.ranks:
            if rank.running or rank.waiting:
                return True
        return False

    def holds_work(self):
        """Whether any rank has requests queued or running, or holds KV for one."""
        for rank in self.ranks:
            if rank.running or rank.waiting or rank.holds_kv():
                return True
        return False

    def start_pass(self, now_ms, horizon_ms=float("inf"), cutoff_ms=float("inf")):
        """Start a grouped pass; returns its end time, or None when no rank has work."""
        rank = self._lone
        if rank is not None:
            start_run = self._start_run
            if start_run:
                end = start_run(now_ms, horizon_ms, cutoff_ms)
                if end is None:
                    return None
            else:
                end = rank.schedule(now_ms)
                if end is None:
                    return None
                if self.extendable:
                    end = rank.extend(horizon_ms, cutoff_ms)
                    if start_run is None:   # (False: the rank has none)
                        self._start_run = getattr(rank, "schedule_extended", None) or False
            self._active = self.ranks
        else:
            end = None
            active = []
            for gate in self._cadence:
                gate.wave = self.wave
            for rank in self.ranks:
                rank_end = rank.schedule(now_ms)
                if rank_end is not None:
                    active.append(rank)
                    if end is None or rank_end > end:
                        end = rank_end
            if not active:
                return None
            if self._round_ranks:
                prefilled = any(rank.prefill_in_pass for rank in active)
                ran_model = any(rank.model_work_in_pass for rank in active)
                for rank in self._round_ranks:
                    rank.finish_round(prefilled, ran_model)
            for rank in active:
                rank.pass_end_ms = end   # every rank's tokens become visible at the group end
            self._active = active
        if end == now_ms:
            self._check_stuck(now_ms)
        self.busy = True
        self._pass_start = now_ms
        self.pass_end_ms = end
        return end

    def _check_stuck(self, now_ms):
        """A zero-time pass: when every rank in it found itself at a fixed point (no effect,
        and the next pass the same), the clock can never move again."""
        active = self._active
        for rank in active:
            if not rank.stuck:
                return
        raise active[0].stuck_error(now_ms)

    def progressed(self):
        """Whether the pass just formed changed anything (the loop's livelock guard asks after
        a zero-time pass)."""
        for rank in self._active:
            if rank.progressed():
                return True
        return False

    def blocked(self):
        """Every rank of the pass just formed runs nothing and has a queue it cannot start."""
        for rank in self._active:
            if rank.running or not rank.waiting:
                return False
        return True

    def spinning_requests(self, limit=3):
        """A few requests of this worker's ranks, named for a livelock message."""
        names = []
        for rank in self.ranks:
            for queue in (rank.running, rank.waiting):
                for r in queue:
                    if len(names) >= limit:
                        return names
                    names.append(request_name(r))
        return names

    def truncate(self, arrival_ms, started=False):
        """A request was placed here at ``arrival_ms`` while extended passes run; returns the
        new end of the pass in flight, or None when it did not change. ``started``: it comes
        in a later round of that instant than the one its passes started in
        (RankBase.truncate)."""
        if not self.extendable:
            return None
        rank = self._lone
        if self._plain_truncate:
            # RankBase.truncate, inline (a decode worker's run is cut about three times per
            # request of the SGLang handoff)
            end = rank.pass_end_ms
            ends = rank._macro_ends
            if ends is not None:
                i = (bisect_right if started else bisect_left)(ends, arrival_ms)
                if i < len(ends) - 1:
                    if i == 0:
                        rank._macro_ends = None
                    else:
                        del ends[i + 1:]
                    rank._run_cut()
                    end = rank.pass_end_ms = ends[i]
        else:
            end = rank.truncate(arrival_ms)
        if end < self.pass_end_ms:
            self.pass_end_ms = end
            self.generation = (self.generation + 1) & 0xFFFF_FFFF
            return end
        return None

    def complete_pass(self):
        self.busy = False
        if self._lone is not None:   # no group: no idle rank to report
            if self._active:
                self._lone.complete()
                self._active = ()
            return
        active = self._active
        for rank in active:
            rank.complete()
        if self._cadence:
            self.wave = self.wave + 1 if self.has_work() else 0
        if len(active) < len(self.ranks) and self.ranks[0].fpm_on:
            self._idle_ranks_passed(active)
        self._active = ()

    def _idle_ranks_passed(self, active):
        """A rank with nothing to do takes part in its worker's grouped pass: the reference
        reports an empty forward-pass row for it, lasting the grouped pass."""
        for rank in self.ranks:
            if rank not in active:
                rank.fpm_last = (self.pass_end_ms, dict(fpm.IDLE_ROW, wall_time=(
                    self.pass_end_ms - self._pass_start) / 1000.0))

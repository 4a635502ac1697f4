"""SGLang's destination-first handoff (FEATURES.md §8) on the disaggregated event loop.

The order of a request: at arrival it is placed on a decode rank (round robin over the decode
pool) and its destination reservation requested; once reserved (at once when that worker has no
pass in flight, else at one of its pass ends or activations: engine/sglang_roles.py), it is
placed on a prefill rank (round robin over the prefill pool, advanced then) as the hidden
one-token copy; the prefill pass that completes it holds the source; the KV transfer starts
then (``destination_missing`` moves the tokens the reservation allocated); activation and the
source release follow as in the source-first order (runtime/disaggregated.py). The record's
``routing_history`` lists the decode placement first.
"""

from __future__ import annotations

from .disaggregated import (CANCEL_SOURCE, RESERVE, START_TRANSFER, SUBMIT,
                            DisaggregatedSimulation, _name)
from .records import _record
from ..engine.sglang_native_roles import NativeSglangDecodeRank

CANCEL_DESTINATION = CANCEL_SOURCE + 1   # a reserved destination whose prefill failed


class SglangDisaggregatedSimulation(DisaggregatedSimulation):
    FIRST_ACTION = RESERVE          # the decode placement and its reservation come first
    HELD_ACTION = START_TRANSFER    # the destination is reserved already

    def _transfer_rank(self, handoff):
        # transfers completing at the same time arrive in the order of their requests'
        # arrival (those taking no time are activated in the order their sources were held)
        return handoff.request.uuid

    def _start_transfer(self, handoff, t):
        super()._start_transfer(handoff, t)
        # the source is held at a prefill pass end, while the destination's worker may run
        # decode-only passes as one event: its activation needs the end of the pass in flight
        # when the transfer completes (the run's horizon when it started)
        key = handoff.decode_key
        inbound = self._inbound.get(key)
        if key in self._uncut and inbound and inbound[0] <= t:
            self._reach(key)   # (a cut later than t leaves the pass end at t as it is)
        if key in self._extended:
            if inbound:
                self._cut(key, inbound[0])

    def _reserved(self, got, t):
        copy, missing_tokens = got
        handoff = copy.handoff
        handoff.reserved_ms = t
        handoff.transfer_tokens = missing_tokens
        self._actions.append((SUBMIT, handoff))   # now the prefill placement

    def _finish(self, handoff, end_ms, status):
        request = handoff.request
        request.terminal_ms = end_ms
        request.terminal_status = status
        if handoff.prefill is None:
            # refused by the decode rank (max_model_len, pool size): it fails at once, before
            # any prefill (the reference's record names no worker)
            route = handoff.decode_route
            record = handoff.record = _record(
                request, status, (None, None, None, 0), 0, None, [], None, None,
                [route if isinstance(route, dict) else ("decode", *route)])
        else:
            record = self._handoff_record(handoff, status)
            decode = handoff.decode
            if handoff.held_ms is None and decode is not None and decode.seq is not None:
                # the prefill failed (rejected): its reserved destination is dropped, as an
                # action of its own (after this round's passes start; at the end of the decode
                # worker's pass in flight)
                self._actions.append((CANCEL_DESTINATION, handoff))
        self._terminal(request, end_ms, status, record)

    def _handoff_record(self, handoff, status):
        record = super()._handoff_record(handoff, status)
        if handoff.record is record:
            record.routing.reverse()              # the decode placement came first
        return record

    def _tell_driver(self, request, end_ms, status):
        super()._tell_driver(request, end_ms, status)
        handoff = request.handoff
        if (handoff is not None and self.on_event is None
                and (handoff.held_ms is None or handoff.released_ms is not None)):
            # the request is terminal, its driver told and its source gone (or never held):
            # nothing reads its links to the handoff again (pending actions hold the handoff
            # itself). Unlinked, the request, the handoff and the role copies are freed by
            # reference counting; as cycles, each run kept them for the cyclic collector,
            # whose collections cost a sixth of feature_sglang_pd_1p2d's time
            request.handoff = None
            for copy in (handoff.prefill, handoff.decode):
                if copy is not None:
                    copy.handoff = None

    def _extra_action(self, kind, handoff, t):
        # CANCEL_DESTINATION
        key = handoff.decode_key
        copy = handoff.decode
        rank = copy.rank
        if key in self._uncut:
            self._reach(key)
        if self.workers[key].busy:
            self._defer(key, rank, kind, handoff, t)
            return
        rank.cancel(copy)
        self._idle[1].add(key)
        got = rank.retry()
        if got is not None:
            self._reserved(got, t)

    def _quiet_pass_end(self, rank):
        # a C decode rank (never watched: a watched rank is the Python one) whose pass end
        # retries no pending destination and runs no deferred action, while no telemetry,
        # scaling or event callback reads the workers
        return (rank.__class__ is NativeSglangDecodeRank and not rank.pending
                and not rank._idle_pass and rank not in self._deferred
                and self.telemetry is None and self.cluster is None and self.on_event is None)

    def _stuck_request(self):
        for worker in self.decode_workers:
            for rank in worker.ranks:
                if rank.pending:
                    r = rank.pending[0]
                    ps = rank.page_size
                    return (f"request {_name(r)} can never get its KV reserved on decode "
                            f"worker {worker.worker_id}: its prompt needs "
                            f"{-(-r.prompt_len // ps) * ps} KV tokens, {rank.kv_summary()}")
        return super()._stuck_request()   # (a queue that never starts)


__all__ = ["SglangDisaggregatedSimulation"]

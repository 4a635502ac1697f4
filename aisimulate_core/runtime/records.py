"""Per-request facts for the report, derived from a finished request's emission stretches.

A record is built in one positional ``RequestRecord`` call (its field order), once per
terminal request: merging keyword dicts per record cost more than the record itself.
"""

from __future__ import annotations

from itertools import starmap
from operator import sub

from ..report import RequestRecord, SummaryRecord


def token_times(request):
    """(first, second, last, count) token times of a request, from its rank's pass end times."""
    stretches = request.stretches
    if not stretches:
        return None, None, None, 0
    ends = request.rank.pass_ends
    first_pass, first_last = stretches[0]
    first = ends[first_pass]
    if first_last > first_pass:
        second = ends[first_pass + 1]
    elif len(stretches) > 1:
        second = ends[stretches[1][0]]
    else:
        second = None
    if len(stretches) == 1:
        return first, second, ends[first_last], first_last - first_pass + 1
    # sum(b - a + 1) without a bytecode loop: an MTP rank's request holds a one-pass stretch
    # per burst token past the first, hundreds of them
    count = len(stretches) - sum(starmap(sub, stretches))
    return first, second, ends[stretches[-1][1]], count


def _pool_admissions(admissions, pool):
    """A rank's admissions ``(at, reused, readmit)`` as the record's ``(at, pool, reused,
    readmit)``."""
    if len(admissions) <= 1:          # the usual request: admitted once
        if not admissions:
            return []
        at, reused, readmit = admissions[0]
        return [(at, pool, reused, readmit)]
    return [(at, pool, reused, readmit) for at, reused, readmit in admissions]


def make_record(request, status):
    rank = request.rank
    if rank is None:
        return _record(request, status, token_times(request), request.max_reused,
                       request.first_reused, _pool_admissions(request.admissions, "agg"),
                       None, None, [])
    route = request.route
    record = _record(request, status, token_times(request), request.max_reused,
                     request.first_reused, _pool_admissions(request.admissions, "agg"),
                     None, rank.scheduler_id,
                     [route if route is not None else
                      ("agg", rank.worker_idx, rank.dp_rank, rank.scheduler_id)])
    splits = rank.tier_split   # KV offload tiers (engine/vllm_offload.py), else None
    if splits is not None:
        add_tier_split(record, splits.pop(request.uuid, None))
    return record


def add_tier_split(record, split):
    """The first admission's reuse as (G1, host) tokens, on the record and its first
    admission entry."""
    if split is None:
        return
    g1, host = split
    record.first_admission_g1_reused_input_tokens = g1
    record.first_admission_host_reused_input_tokens = host
    record.admissions[0] = (*record.admissions[0], g1, host)


def make_summary_record(request, status):
    """``make_record``'s values of the fields the summary reads, for a collector that keeps no
    records (``Collector.keeps_records`` false)."""
    first, second, last, count = token_times(request)
    return SummaryRecord(request.uuid, request.request_id, request.arrival_ms, request.terminal_ms,
                         status, request.prompt_len, count, first, second, last,
                         request.max_reused, request.first_reused, request.admissions)


def make_disagg_record(handoff, status):
    """The record of a disaggregated request: tokens from its decode copy, admissions of both
    pools in time order (every prefill admission precedes the decode ones), the handoff's times."""
    prefill, decode = handoff.prefill, handoff.decode
    admissions = _pool_admissions(prefill.admissions, "prefill")
    rank = prefill.rank
    routing = [handoff.prefill_route if handoff.prefill_route is not None else
               ("prefill", rank.worker_idx, rank.dp_rank, rank.scheduler_id)]
    route = handoff.decode_route
    if route is not None:
        routing.append(route if isinstance(route, dict) else ("decode", *route))
    max_reused = prefill.max_reused  # the summary's reuse: the most over both pools
    if decode is None:
        times, decode_worker = (None, None, None, 0), None
    else:
        admissions += _pool_admissions(decode.admissions, "decode")
        max_reused = max(max_reused, decode.max_reused)
        times, decode_worker = token_times(decode), decode.rank.scheduler_id
    record = _record(handoff.request, status, times, max_reused, prefill.first_reused,
                     admissions, rank.scheduler_id, decode_worker, routing)
    record.source_held_ms = handoff.held_ms
    record.destination_reserved_ms = handoff.reserved_ms
    record.destination_activated_ms = handoff.activated_ms
    record.source_released_ms = handoff.released_ms
    return record


def make_disagg_summary_record(handoff, status):
    """``make_disagg_record``'s values of the fields the summary reads, for a collector that
    keeps no records (``Collector.keeps_records`` false)."""
    prefill, decode = handoff.prefill, handoff.decode
    request = handoff.request
    max_reused = prefill.max_reused
    admissions = prefill.admissions     # (only whether both pools' are empty is read)
    if decode is None:
        first, second, last, count = None, None, None, 0
    else:
        if decode.max_reused > max_reused:
            max_reused = decode.max_reused
        if not admissions:
            admissions = decode.admissions
        first, second, last, count = token_times(decode)
    return SummaryRecord(request.uuid, request.request_id, request.arrival_ms, request.terminal_ms,
                         status, request.prompt_len, count, first, second, last, max_reused,
                         prefill.first_reused, admissions)


def _record(request, status, times, reused, first_reused, admissions, prefill_worker,
            decode_worker, routing):
    """A record of ``request`` with the token ``times`` (``token_times``) of the copy that
    emitted them, in one positional call (RequestRecord's field order)."""
    first, second, last, count = times
    return RequestRecord(
        request.uuid, request.request_id, request.session_id, request.turn_index,
        request.play_id, request.metadata, request.arrival_ms,
        # only agentic requests report a dispatch time (when the driver handed them over)
        request.dispatched_ms if request.play_id is not None else None,
        request.terminal_ms, status, request.prompt_len, request.max_output,
        count, first, second, last, reused, first_reused, admissions,
        prefill_worker, decode_worker, routing,
        agentic=getattr(request, "agentic", None))  # only agentic drivers' requests carry it

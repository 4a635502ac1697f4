"""Per-request facts for the report, derived from a finished request's emission stretches."""

from __future__ import annotations

from ..report import RequestRecord


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
    count = 0
    for a, b in stretches:
        count += b - a + 1
    return first, second, ends[stretches[-1][1]], count


def make_record(request, status):
    rank = request.rank
    return _record(
        request, status, request,
        reused_input_tokens=request.max_reused,
        first_admission_reused_input_tokens=request.first_reused,
        admissions=[(at, "agg", reused, readmit) for at, reused, readmit in request.admissions],
        prefill_worker_idx=None,
        decode_worker_idx=rank.scheduler_id if rank is not None else None,
        routing=[request.route if request.route is not None else
                 ("agg", rank.worker_idx, rank.dp_rank, rank.scheduler_id)] if rank else [],
    )


def make_disagg_record(handoff, status):
    """The record of a disaggregated request: tokens from its decode copy, admissions of both
    pools in time order (every prefill admission precedes the decode ones), the handoff's times."""
    prefill, decode = handoff.prefill, handoff.decode
    admissions = [(at, "prefill", reused, readmit) for at, reused, readmit in prefill.admissions]
    rank = prefill.rank
    routing = [handoff.prefill_route if handoff.prefill_route is not None else
               ("prefill", rank.worker_idx, rank.dp_rank, rank.scheduler_id)]
    route = handoff.decode_route
    if route is not None:
        routing.append(route if isinstance(route, dict) else ("decode", *route))
    max_reused = prefill.max_reused
    if decode is not None:
        admissions += [(at, "decode", reused, readmit) for at, reused, readmit in decode.admissions]
        max_reused = max(max_reused, decode.max_reused)
    return _record(
        handoff.request, status, decode,
        reused_input_tokens=max_reused,  # the summary's reuse: the most over both pools
        first_admission_reused_input_tokens=prefill.first_reused,
        admissions=admissions,
        prefill_worker_idx=rank.scheduler_id,
        decode_worker_idx=decode.rank.scheduler_id if decode is not None else None,
        routing=routing,
        source_held_ms=handoff.held_ms,
        destination_reserved_ms=handoff.reserved_ms,
        destination_activated_ms=handoff.activated_ms,
        source_released_ms=handoff.released_ms,
    )


def _record(request, status, emitter, **fields):
    """A record of ``request`` with the tokens ``emitter`` (its copy on the rank that produced
    them, or None) emitted."""
    first, second, last, count = token_times(emitter) if emitter is not None else (None, None, None, 0)
    return RequestRecord(
        uuid=request.uuid,
        request_id=request.request_id,
        session_id=request.session_id,
        turn_index=request.turn_index,
        play_id=request.play_id,
        metadata=request.metadata,
        agentic=getattr(request, "agentic", None),  # only agentic drivers' requests carry it
        arrival_time_ms=request.arrival_ms,
        # only agentic requests report a dispatch time (when the driver handed them over)
        dispatched_at_ms=request.dispatched_ms if request.play_id is not None else None,
        terminal_time_ms=request.terminal_ms,
        terminal_status=status,
        input_length=request.prompt_len,
        requested_output_length=request.max_output,
        output_length=count,
        first_token_ms=first,
        second_token_ms=second,
        last_token_ms=last,
        **fields,
    )

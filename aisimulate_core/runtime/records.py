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
    first, second, last, count = token_times(request)
    admissions = [(at, "agg", reused, readmit) for at, reused, readmit in request.admissions]
    rank = request.rank
    return RequestRecord(
        uuid=request.uuid,
        request_id=request.request_id,
        session_id=request.session_id,
        turn_index=request.turn_index,
        play_id=request.play_id,
        metadata=request.metadata,
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
        reused_input_tokens=request.max_reused,
        first_admission_reused_input_tokens=request.first_reused,
        admissions=admissions,
        prefill_worker_idx=None,
        decode_worker_idx=rank.scheduler_id if rank is not None else None,
        routing=[("agg", request.worker_idx, rank.dp_rank, rank.scheduler_id)] if rank else [],
    )

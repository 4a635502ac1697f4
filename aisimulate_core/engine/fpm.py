"""Forward-pass metrics (FPM) of a vLLM / TensorRT-LLM rank: what the scaling snapshot's
``*_fpm_snapshots`` rows describe (CLUSTER.md §3.8), one row per completed pass.

Computed only while a scaling policy runs (``rank.fpm_on``): the queue at the pass start, the
prompts the pass computes and the decoders it steps. Variances are population variances. A
pass extended by decode-only passes (``VllmRank.extend``) reports its last pass: the same
decoders, each one token longer per pass, so the same variance.
"""

from __future__ import annotations

ROW_KEYS = ("wall_time", "num_prefill_requests", "sum_prefill_tokens", "var_prefill_length",
            "sum_prefill_kv_tokens", "num_decode_requests", "sum_decode_kv_tokens",
            "var_decode_kv_tokens", "num_queued_prefill", "sum_queued_prefill_tokens",
            "var_queued_prefill_length", "num_queued_decode", "sum_queued_decode_kv_tokens",
            "var_queued_decode_kv_tokens")
IDLE_ROW = dict.fromkeys(ROW_KEYS, 0)
IDLE_ROW.update(wall_time=0.0, var_prefill_length=0.0, var_decode_kv_tokens=0.0,
                var_queued_prefill_length=0.0, var_queued_decode_kv_tokens=0.0)


def sum_var(values):
    n = len(values)
    if n == 0:
        return 0, 0.0
    total = sum(values)
    mean = total / n
    # a list, not a generator: the same additions in the same order, at half the cost
    return total, sum([(v - mean) ** 2 for v in values]) / n


_NOTHING_QUEUED = ((), ())    # read only (pass_row)


def queue_stats(waiting):
    """(queued prefill lengths stats, queued decode context stats) of the queue now: a
    request that generated nothing yet waits for its prefill, a preempted one to resume."""
    if not waiting:
        return _NOTHING_QUEUED
    prefill, decode = [], []
    for r in waiting:
        if r.generated:
            decode.append(r.prompt_len + r.generated)
        else:
            prefill.append(r.prompt_len)
    return prefill, decode


def pass_row(rank, now_ms, P, ready):
    """The row of the pass ``rank`` just formed at ``now_ms`` (index ``P``)."""
    chunks = rank._fpm_chunks
    if chunks:
        _, prompt_var = sum_var([r.prompt_len for r in chunks])
        chunk_kv = sum([r.pass_chunk[2] for r in chunks])
    else:
        prompt_var, chunk_kv = 0.0, 0
    contexts = [r.base_len - r.base_pass + P for bucket in rank.buckets.values() for r in bucket]
    if getattr(rank, "stretchless", False) or getattr(rank, "mtp", None) is not None:
        # no open stretches (MTP bursts, state_cache): the decoders are the requests the pass
        # steps without prompt work, before their tokens
        for r in ready:
            if r.pass_chunk[1] < 0 and r.generated < r.out_limit:
                contexts.append(r.prompt_len + r.generated)
    else:
        for r in ready:
            if r.pass_chunk[1] < 0 and r.out_limit > 0 and not r.generated:
                contexts.append(r.prompt_len + r.generated)   # a decode-role activation's step
    context_sum, context_var = sum_var(contexts)
    queued_prefill, queued_decode = rank._fpm_queue
    qp_sum, qp_var = sum_var(queued_prefill) if queued_prefill else (0, 0.0)
    qd_sum, qd_var = sum_var(queued_decode) if queued_decode else (0, 0.0)
    return {
        "wall_time": now_ms,   # the pass start: completed() makes it the (grouped) duration
        "num_prefill_requests": len(chunks),
        "sum_prefill_tokens": rank._pf_tokens,
        "var_prefill_length": prompt_var,
        "sum_prefill_kv_tokens": chunk_kv,
        "num_decode_requests": len(contexts),
        "sum_decode_kv_tokens": context_sum,
        "var_decode_kv_tokens": context_var,
        "num_queued_prefill": len(queued_prefill),
        "sum_queued_prefill_tokens": qp_sum,
        "var_queued_prefill_length": qp_var,
        "num_queued_decode": len(queued_decode),
        "sum_queued_decode_kv_tokens": qd_sum,
        "var_queued_decode_kv_tokens": qd_var,
    }


def completed(rank):
    """(end ms, row) of the pass completing now on ``rank``: a rank of an attention-DP group
    reports the grouped pass's duration, as the reference does."""
    row = rank._fpm_pending
    if row is None:
        return rank.pass_end_ms, None
    ends = rank._macro_ends
    if ends is None or len(ends) < 2:
        # the row's wall_time holds the pass start until now
        return rank.pass_end_ms, dict(row, wall_time=(rank.pass_end_ms - row["wall_time"]) / 1000.0)
    row = dict(row, wall_time=(ends[-1] - ends[-2]) / 1000.0, num_prefill_requests=0,
               sum_prefill_tokens=0, var_prefill_length=0.0, sum_prefill_kv_tokens=0)
    row["sum_decode_kv_tokens"] += row["num_decode_requests"] * (len(ends) - 1)
    return ends[-1], row


def snapshot_rows(pool, since_ms, now_ms):
    """The FPM rows of ``pool`` at a tick at ``now_ms``, the previous one at ``since_ms``: each
    rank of an active worker (draining ones report none) that completed a pass since reports
    its latest; a rank silent for 1000 ms or more reports an all-zero row and its clock moves
    on by whole seconds (the reference's ``LatestFpmBuffer::emit_idle_due``)."""
    rows = []
    for worker in pool.router.active:
        for rank in worker.ranks:
            if not rank.fpm_on:
                continue
            last = rank.fpm_last
            if last is not None and last[0] > since_ms and last[1] is not None:
                row = last[1]
                rank.fpm_clock = last[0]
            elif now_ms - rank.fpm_clock >= 1000.0:
                row = IDLE_ROW
                rank.fpm_clock += (now_ms - rank.fpm_clock) // 1000.0 * 1000.0
            else:
                continue
            rows.append({"worker_id": worker.worker_id, "dp_rank": rank.dp_rank, **row})
    return rows

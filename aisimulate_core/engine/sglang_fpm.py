"""The forward-pass metrics row of an SGLang pass (CLUSTER.md §3.8), as the reference's SGLang
scheduler builds it: the prefill chunks that computed tokens (prompt length, tokens already in
KV, tokens computed), the members a decode step stepped (their lengths before the step, a
member retracted by that step included), and the queue the pass leaves waiting (retracted
requests included). Population variances. ``wall_time`` is the duration of the grouped
pass (attention DP), as the reference reports it.
"""

from __future__ import annotations

from .fpm import ROW_KEYS, sum_var, queue_stats


def pass_row(rank, now_ms):
    """The row of the pass ``rank`` just formed at ``now_ms``; its ``wall_time`` holds the
    start until the pass completes (sglang_cluster.py makes it the grouped pass's duration)."""
    chunks = [(r.prompt_len, prefix, chunk_end - prefix)
              for r, prefix, chunk_end, _ in rank._pass_chunks if chunk_end > prefix]
    _, prompt_var = sum_var([prompt for prompt, _, _ in chunks])
    decoders = rank._decoder_lens or ()
    decode_sum, decode_var = sum_var(decoders)
    queued_prefill, queued_decode = queue_stats(rank.waiting)
    qp_sum, qp_var = sum_var(queued_prefill)
    qd_sum, qd_var = sum_var(queued_decode)
    # in ROW_KEYS order
    return dict(zip(ROW_KEYS, (
        now_ms,
        len(chunks), sum(computed for _, _, computed in chunks), prompt_var,
        sum(prefix for _, prefix, _ in chunks),
        len(decoders), decode_sum, decode_var,
        len(queued_prefill), qp_sum, qp_var,
        len(queued_decode), qd_sum, qd_var)))

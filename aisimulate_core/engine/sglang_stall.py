"""Why an SGLang rank cannot progress, as one line naming the limit and its JSON path.

Two dead ends exist (SEMANTICS 2.5): nothing runs and the head of the queue is never admitted
(a prefill budget or the KV pool is too small for it), or a lone running request needs a KV
page that nothing will ever free (SGLang retracts only while more than one request runs, and a
partly prefilled prompt keeps its pages). The reference aborts on the first and repeats an
empty pass forever on the second; the rank raises ``SimulationError`` with these messages.
"""

from __future__ import annotations

from .request import request_name
from .sglang_tokens import ensure_tokens


def _pages(tokens, ps):
    return -(-tokens // ps) * ps


def _pool(rank):
    path = rank.config_path
    return (f"{path}.num_gpu_blocks: {rank.total_kv_tokens // rank.page_size} blocks of "
            f"{rank.page_size} tokens ({rank.total_kv_tokens} KV tokens per rank)")


def head_stall_reason(rank, r):
    """The limit that keeps ``r``, the head of the queue of a rank running nothing, waiting."""
    path = rank.config_path
    ps = rank.page_size
    budget = rank.budget
    length = r.prompt_len + r.generated
    start = r.computed
    if start == 0 and rank.caching:
        limit = length if r.out_limit == 0 else length - 1
        cached, _ = rank.cache.match_where(ensure_tokens(r, length), limit)
        start = cached
    extend = length - start
    chunk_size = budget.chunk_size
    split = ""
    if rank.group_size > 1:
        split = f" ({rank.chunk_setting} split over the {rank.group_size} ranks of a DP group)"
    if _pages(extend, ps) <= chunk_size:
        chunk = extend
    else:
        chunk = min((chunk_size // ps) * ps, extend)
        if chunk == 0:
            return (f"{path}.sglang.chunked_prefill_size: {chunk_size}{split} < one KV page of "
                    f"{ps} tokens ({path}.block_size), so the prompt of request "
                    f"{request_name(r)} ({r.prompt_len} tokens) never gets a chunk")
    charged = _pages(chunk, ps)
    if charged > budget.max_prefill:
        what = (f"prompt of request {request_name(r)} ({chunk} tokens" if chunk == length
                else f"prefill chunk of request {request_name(r)} ({chunk} of its {length} tokens")
        pages = f", {charged} in whole {ps}-token pages" if charged != chunk else ""
        return f"{path}.sglang.max_prefill_tokens: {budget.max_prefill} < {what}{pages})"
    whole = _pages(length, ps)
    reserve = budget.output_reserve(r)
    if whole + reserve >= rank.total_kv_tokens:
        return _pool_too_small(rank, r, whole, reserve)
    # it would fit alone: other queued requests hold the pages it needs
    cache = rank.cache
    held = [q for q in rank.waiting if q.seq is not None and q is not r]
    holders = ", ".join(f"request {request_name(q)} {q.held_blocks}" for q in held[:3])
    return (f"{_pool(rank)} has {cache.available() + cache.evictable_size} tokens free, too few "
            f"for the next {charged}-token chunk of request {request_name(r)} ({start} of its "
            f"{length} tokens computed), and partly prefilled requests that never run hold "
            f"the rest ({holders or 'none'})")


def _pool_too_small(rank, r, tokens, reserve):
    length = r.prompt_len + r.generated
    what = f"{length} prompt tokens" if not r.generated else (
        f"{length} tokens ({r.prompt_len} prompt + {r.generated} generated before a retraction)")
    if tokens != length:
        what += f", {tokens} in whole {rank.page_size}-token pages,"
    return (f"{_pool(rank)} cannot hold request {request_name(r)}: {what} plus an output "
            f"reserve of {reserve} (at most {rank.config_path}.sglang.clip_max_new_tokens = "
            f"{rank.budget.clip})")


def fit_reason(rank, r):
    """Why a new request can never be admitted on an empty ``rank``, or None: admission needs
    its whole prompt pages plus its clipped output reserve below the pool size."""
    out = r.max_output
    if rank.max_model_len is not None:
        out = min(out, max(rank.max_model_len - r.prompt_len, 0))
    reserve = min(out, rank.budget.clip)
    pages = _pages(r.prompt_len, rank.page_size)
    if pages + reserve < rank.total_kv_tokens:
        return None
    return _pool_too_small(rank, r, pages, reserve)


def starved_decoder_reason(rank):
    """The limit that keeps the lone running request of ``rank`` from its next KV page."""
    path = rank.config_path
    ps = rank.page_size
    r = next(iter(rank.running))
    rank.running.sync(r)
    need = _pages(r.prompt_len + r.out_limit - 1, ps)   # its final token needs no KV slot
    name = request_name(r)
    if need > rank.total_kv_tokens:
        return (f"{_pool(rank)} cannot hold request {name} ({r.prompt_len} prompt + "
                f"{r.out_limit} output tokens, {need} KV tokens at its end): admission reserved "
                f"only {min(r.out_limit, rank.budget.clip)} output tokens "
                f"({path}.sglang.clip_max_new_tokens = {rank.budget.clip}) and SGLang never "
                f"retracts a lone running request")
    partial = [q for q in rank.waiting if q.seq is not None]
    held = ", ".join(f"request {request_name(q)} holds {q.held_blocks} of the "
                     f"{q.prompt_len + q.generated} tokens it is prefilling" for q in partial[:3])
    parts = [f"request {name} holds {r.held_blocks}"]
    if held:
        parts.append(held + f" (a request part way through its prefill, {path}.sglang."
                            f"chunked_prefill_size = {rank.budget.chunk_size}, is never "
                            f"retracted)")
    return (f"{_pool(rank)} is full and request {name}, the only one running, needs "
            f"another {ps}-token page that nothing will free: " + "; ".join(parts))

"""Token arrays of SGLang requests and the longest-prefix-match queue order.

The radix tree compares tokens, so a request's prompt is expanded once into a flat array;
output tokens are appended only as far as the tree needs them. Unauthored outputs are one
value unique to the request (as in workload/prompt.py): only the request itself finds them.
"""

from __future__ import annotations

from array import array

_OUTPUT_TAG = 0x8000_0000
LPM_MAX_WAITING = 128
DUPLICATE_CHECK_TOKENS = 32


def ensure_tokens(r, depth):
    """The request's token array, covering at least ``depth`` tokens of prompt + outputs."""
    tokens = r.hash_cache
    if tokens is None:
        prompt = r.prompt
        if len(prompt.values) == prompt.length:
            tokens = array("I", prompt.values)
        else:
            tokens = array("I")
            for value, count in zip(prompt.values, prompt.lengths):
                tokens.extend(array("I", (value,)) * count)
        r.hash_cache = tokens
    missing = depth - len(tokens)
    if missing > 0:
        authored = r.output_token_ids
        if authored is not None:
            start = len(tokens) - r.prompt_len
            tokens.extend(array("I", authored[start:start + missing]))
        else:
            tokens.extend(array("I", (_OUTPUT_TAG | (r.uuid & 0x7FFF_FFFF),)) * missing)
    return tokens


def lpm_order(rank, waiting):
    """Reorder ``waiting`` by longest cached prefix (stable); a request whose match is short
    and whose first pages repeat an earlier waiting request's goes behind the others."""
    ranked = lpm_ranked(rank, waiting)
    waiting.clear()
    waiting.extend(ranked)


def lpm_ranked(rank, waiting):
    """``waiting`` in the order ``lpm_order`` gives it, as a new list."""
    cache = rank.cache
    ps = rank.page_size
    dup_len = -(-DUPLICATE_CHECK_TOKENS // ps) * ps
    seen = set()
    scored = []
    for index, r in enumerate(waiting):
        length = r.prompt_len + r.generated
        tokens = ensure_tokens(r, length)
        matched = cache.match_len(tokens, length)
        behind = False
        if matched <= DUPLICATE_CHECK_TOKENS and length >= dup_len:
            key = tokens[:dup_len].tobytes()
            if key in seen:
                behind = True
            else:
                seen.add(key)
        scored.append((behind, -matched, index, r))
    scored.sort()
    return [item[3] for item in scored]

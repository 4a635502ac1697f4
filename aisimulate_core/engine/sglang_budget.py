"""SGLang's admission arithmetic: the new-token-ratio reservation and the prefill budgets.

The reference computes these in f64 in a fixed order (a sum over the running batch, then one
subtraction per admitted chunk); the same order here keeps every >= comparison bit-exact.
"""

from __future__ import annotations

INIT_RATIO = 0.7
MIN_RATIO_FACTOR = 0.14
DECAY_STEPS = 600.0
RETRACT_DECODE_STEPS = 20


class RatioSchedule:
    """``new_token_ratio``: how much of each running request's remaining output admission
    keeps free. It decays on every decode pass and is re-estimated after a retraction."""

    __slots__ = ("init", "min", "step", "value")

    def __init__(self, conservativeness):
        self.init = INIT_RATIO * conservativeness
        self.min = self.init * MIN_RATIO_FACTOR
        self.step = (self.init - self.min) / DECAY_STEPS
        self.value = self.init

    def decay(self):
        value = self.value - self.step
        self.value = value if value > self.min else self.min

    def reset(self):
        self.value = self.init

    def settled(self):
        """Whether ``decay`` would leave the ratio as it is (at its floor, or no step)."""
        value = self.value - self.step
        return (value if value > self.min else self.min) == self.value


def retraction_ratio(survivors):
    """The ratio SGLang re-estimates after retracting: decoded so far plus 20 steps each,
    over the survivors' total output limit (at most 1)."""
    decoded = 0
    limit = 0
    for r in survivors:
        decoded += r.generated
        limit += r.out_limit
    estimate = (float(decoded) + RETRACT_DECODE_STEPS * float(len(survivors))) / (float(limit) + 1.0)
    return estimate if estimate < 1.0 else 1.0


class PrefillBudget:
    """Per-pass budgets of ``get_new_batch_prefill``."""

    __slots__ = ("max_prefill", "chunk_size", "clip", "page_size")

    def __init__(self, max_prefill_tokens, chunked_prefill_size, clip_max_new_tokens, page_size):
        self.max_prefill = max_prefill_tokens
        self.chunk_size = chunked_prefill_size
        self.clip = clip_max_new_tokens
        self.page_size = page_size

    def output_reserve(self, r):
        remaining = r.out_limit - r.generated
        if remaining < 0:
            remaining = 0
        return remaining if remaining < self.clip else self.clip

    def reserved_exact(self, running, ratio):
        """Σ ratio × min(remaining, clip) over the running batch, summed in running order."""
        reserved = 0.0
        clip = self.clip
        D = running.D
        for r in running:
            remaining = r.out_limit - r.base_gen - D + r.open_start
            if remaining > clip:
                remaining = clip
            reserved += remaining * ratio
        return reserved


class TotalRoom:
    """``rem_total_tokens``: free plus evictable tokens, less the decode reservation of the
    running batch, less what this pass already admitted.

    The reference sums the reservation request by request in f64; that order matters only
    when a decision falls within rounding of the boundary, so the sum starts as one product
    and is redone in the reference's order (replaying this pass's charges) only then."""

    __slots__ = ("capacity", "value", "exact", "charges", "_exact_reserved")

    def __init__(self, capacity, approx_reserved, exact_reserved):
        self.capacity = capacity
        self.value = float(capacity) - approx_reserved
        self.exact = False
        self.charges = []
        self._exact_reserved = exact_reserved

    def admits(self, cost):
        """False when the reference stops admitting: ``cost >= rem_total``."""
        if not self.exact and abs(self.value - cost) < 1e-3:
            value = float(self.capacity) - self._exact_reserved()
            for charge in self.charges:
                value -= charge
            self.value = value
            self.exact = True
        return cost < self.value

    def charge(self, cost):
        self.value -= cost
        self.charges.append(cost)



def refused_passes(running, ratio, *, passes, room, capacity, cost, rounds_left):
    """How many of the next ``passes`` decode passes of ``running`` keep the queue's head
    refused, each finding its page growth in ``room``.

    The head would join a pass unless ``cost >= rem_total`` there, or the pass is one of the
    ``rounds_left`` deferred by ``prefill_decode_interval``. ``rem_total`` is recomputed per
    pass as ``TotalRoom`` does (``capacity`` less the decode reservation at that pass's ratio);
    a pass where it falls within rounding of ``cost`` (the reference's exact sum decides) counts
    as one the head joins."""
    n = len(running)
    ps = running.page_size
    crossings = running.crossings
    clip = running.clip
    unclip = running.unclip
    n_small = running.n_small
    sum_small = running.sum_small
    n_big = running.n_big
    d = running.D
    value = ratio.value
    step = ratio.step
    floor = ratio.min
    for k in range(passes):
        need = n if ps == 1 else ps * crossings[(-d) % ps]
        if need > room:
            return k
        if rounds_left:
            rounds_left -= 1
        else:
            rem_total = float(capacity) - (sum_small + clip * n_big) * value
            if cost < rem_total or abs(rem_total - cost) < 1e-3:   # admitted, or close
                return k
        room -= need
        capacity -= need
        # the decode step's bookkeeping (RunningBatch.record_decode), then the ratio's decay
        sum_small -= n_small
        moved = unclip.get(d)
        if moved:
            moved = len(moved)
            n_big -= moved
            n_small += moved
            sum_small += moved * clip
        d += 1
        decayed = value - step
        value = decayed if decayed > floor else floor
    return passes

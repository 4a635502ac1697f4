"""Order statistics and streaming distributions used by the report.

Two kinds of distribution appear in the reference's summary:

* per-request scalars (TTFT, TTST, TPOT, E2E): kept exactly; percentiles are order statistics at
  the *rounded rank* ``round((n - 1) * p / 100)`` (Rust rounding: half away from zero), the mean
  is a left-to-right sum over n and ``std`` is the population standard deviation (two passes);
* per-token samples (ITL, per-user token rate): too many to keep, so the reference streams them
  into a DDSketch (crate ``ddsketchy`` 0.1.7, relative accuracy 0.001, at most 32768 bins per
  sign) and keeps an exact Welford mean / variance and exact min / max beside it.

The sketch here reproduces that crate's observable behaviour: the logarithmic key mapping, the
representative value of a key, the zero bucket, the floored quantile rank, the single-sample
shortcut and the bounded store that folds its lowest keys together when the key span would
exceed the bin limit.
"""

from __future__ import annotations

import heapq
import math
import sys
from array import array
from bisect import bisect_right
from functools import lru_cache
from itertools import accumulate
from typing import Iterable, Iterator, NamedTuple, Sequence

RELATIVE_ACCURACY = 0.001
MAX_BINS = 32_768
PERCENTILES = (50.0, 75.0, 90.0, 95.0, 99.0)


class DistributionStats(NamedTuple):
    """The nine numbers the summary prints for one distribution, in the summary's order."""

    mean: float
    min: float
    max: float
    median: float
    p75: float
    p90: float
    p95: float
    p99: float
    std: float


EMPTY_STATS = DistributionStats(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


# --------------------------------------------------------------------------------------------
# exact statistics


def round_half_away(x: float) -> float:
    """Round to the nearest integer, ties away from zero (Rust's ``f64::round``).

    Python's ``round`` ties to even, and ``floor(x + 0.5)`` is wrong just below one half
    (0.49999999999999994 + 0.5 rounds up to 1.0 in binary floating point).
    """
    if x != x or x in (math.inf, -math.inf):
        return x
    magnitude = abs(x)
    whole = math.floor(magnitude)
    if magnitude - whole >= 0.5:  # exact: taking the fractional part never rounds
        whole += 1
    return float(whole) if x >= 0 else -float(whole)


def rank_index(n: int, percentile: float) -> int:
    """Index of the ``percentile`` order statistic among ``n`` sorted values (n >= 1)."""
    rank = round_half_away((n - 1) * percentile / 100.0)
    index = int(rank) if rank > 0 else 0  # `as usize` saturates negatives to 0
    return min(index, n - 1)


def seq_sum(values: Iterable[float]) -> float:
    """Plain left-to-right float sum, as Rust's ``Iterator::sum`` does (no compensation)."""
    total = 0.0
    for value in values:
        total += value
    return total


# CPython before 3.12 sums floats left to right in a double, from 0.0 (no compensation; 3.12
# compensates): there the built-in gives seq_sum's bits in one C loop.
_seq_sum = (lambda values: sum(values, 0.0)) if sys.version_info < (3, 12) else seq_sum


def mean(values: Sequence[float]) -> float:
    return seq_sum(values) / len(values) if values else 0.0


def population_std(values: Sequence[float]) -> float:
    """Two-pass population standard deviation: sqrt(sum((x - mean)^2) / n)."""
    if not values:
        return 0.0
    centre = mean(values)
    squares = 0.0
    for value in values:
        centred = value - centre
        squares += centred * centred
    return math.sqrt(squares / len(values))


def percentile(values: Sequence[float], pct: float) -> float:
    """Rounded-rank order statistic of unsorted ``values`` (0.0 when empty)."""
    if not values:
        return 0.0
    return sorted(values)[rank_index(len(values), pct)]


def exact_stats(values: Sequence[float]) -> DistributionStats:
    """Exact summary of ``values`` in their given order (the order only affects the mean's and
    std's last bits, through the sequential sum). ``values`` may be a list or an ``array('d')``;
    a large array is sorted in runs (``SortedRuns``), with the same result.

    The figures of ``mean``, ``rank_index`` and ``population_std`` (the std centred on the mean
    of the *sorted* values, summed in sorted order), computed in one function: a report asks
    for four of these, most of them over a few dozen values."""
    n = len(values)
    if not n:
        return EMPTY_STATS
    if n > SORT_RUN:
        ordered = SortedRuns(values)
        low, high, *picks = ordered.select([0, n - 1] + [rank_index(n, pct) for pct in PERCENTILES])
        return DistributionStats(mean(values), low, high, *picks, population_std(ordered))
    ordered = sorted(values)
    span = n - 1
    picks = []
    for pct in PERCENTILES:   # rank_index, inline: the rounded rank, within [0, n - 1]
        rank = span * pct / 100.0
        whole = math.floor(rank)
        if rank - whole >= 0.5:
            whole += 1
        picks.append(ordered[whole if whole < span else span])
    centre = _seq_sum(ordered) / n
    squares = 0.0
    for value in ordered:
        centred = value - centre
        squares += centred * centred
    return DistributionStats(_seq_sum(values) / n, ordered[0], ordered[span], *picks,
                             math.sqrt(squares / n))


SORT_RUN = 1 << 20


class SortedRuns:
    """``values`` in ascending order, sorted ``SORT_RUN`` at a time and merged when read.

    Sorting a whole array at once would hold every value as a Python float (32 bytes each,
    beside the array's 8); runs bound that to one run. A run is an ``array('d')`` copy, so the
    caller's values keep their order. Reading gives the same sequence as ``sorted(values)``.
    """

    __slots__ = ("runs", "length")

    def __init__(self, values: Sequence[float]) -> None:
        self.length = n = len(values)
        if n <= SORT_RUN:
            self.runs = [sorted(values)]
        else:
            self.runs = [array("d", sorted(values[i:i + SORT_RUN])) for i in range(0, n, SORT_RUN)]

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[float]:
        if len(self.runs) == 1:
            return iter(self.runs[0])
        return heapq.merge(*self.runs)

    def select(self, indices: list[int]) -> list[float]:
        """The values at these positions of the ascending order."""
        if len(self.runs) == 1:
            run = self.runs[0]
            return [run[i] for i in indices]
        wanted = set(indices)
        found = {}
        last = max(wanted)
        for index, value in enumerate(self):
            if index in wanted:
                found[index] = value
                if index == last:
                    break
        return [found[i] for i in indices]


# --------------------------------------------------------------------------------------------
# Welford


class Welford:
    """Streaming count / mean / population variance / min / max.

    ``add(x)`` is the textbook Welford step (bit-for-bit the reference's update). ``add(x, c)``
    with c > 1 merges a block of c identical samples in one step (Chan et al.), which equals c
    single steps up to rounding.
    """

    __slots__ = ("count", "mean", "m2", "min", "max")

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.min = math.inf
        self.max = -math.inf

    def add(self, value: float, count: int = 1) -> None:
        if count <= 0 or not math.isfinite(value):
            return
        before = self.count
        self.count = total = before + count
        delta = value - self.mean
        if count == 1:
            self.mean += delta / total
            self.m2 += delta * (value - self.mean)
        else:
            self.mean += delta * count / total
            self.m2 += delta * delta * before * count / total
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.count) if self.count else 0.0

    @classmethod
    def from_counts(cls, items: Iterable[tuple[float, int]]) -> "Welford":
        """Moments of a histogram of (value, multiplicity) pairs, in any order.

        Sums are exact (``math.fsum``) before the final rounding, so the result does not depend
        on the order of the pairs; it equals a sample-by-sample Welford pass up to the last
        bits that pass accumulates.
        """
        moments = cls()
        pairs = [(v, c) for v, c in items if c > 0 and math.isfinite(v)]
        if not pairs:
            return moments
        moments.count = total = sum(c for _, c in pairs)
        moments.mean = centre = math.fsum(v * c for v, c in pairs) / total
        moments.m2 = math.fsum(c * (v - centre) * (v - centre) for v, c in pairs)
        moments.min = min(v for v, _ in pairs)
        moments.max = max(v for v, _ in pairs)
        return moments


# --------------------------------------------------------------------------------------------
# DDSketch


class _Store:
    """Bounded dense histogram over integer keys for one sign of the sketch.

    Counts live in ``bins``; index i holds key ``offset + i``. The array grows in chunks of 128
    up to ``limit``. A new range is recentred inside the array. When a range no longer fits in
    ``limit`` bins, every key below ``max_key - limit + 1`` is folded into that key and the store
    is marked collapsed; from then on a key below ``min_key`` is counted in slot 0.
    """

    CHUNK = 128
    __slots__ = ("bins", "count", "min_key", "max_key", "offset", "limit", "collapsed",
                 "_running")

    def __init__(self, limit: int) -> None:
        self.bins: list[int] = []
        self.count = 0
        self.min_key = 2**31 - 1
        self.max_key = -(2**31)
        self.offset = 0
        self.limit = limit
        self.collapsed = False
        self._running: list[int] | None = None  # running counts of bins, for quantiles

    def add(self, key: int, count: int = 1) -> None:
        self._running = None
        if key < self.min_key:
            if not self.collapsed:
                self._extend(key)
            slot = 0 if self.collapsed else key - self.offset
        else:
            if key > self.max_key:
                self._extend(key)
            slot = key - self.offset
        self.bins[slot] += count
        self.count += count

    def _wanted_length(self, lo: int, hi: int) -> int:
        span = hi - lo + 1
        return min(self.CHUNK * -(-span // self.CHUNK), self.limit)

    def _extend(self, key: int) -> None:
        lo = min(key, self.min_key)
        hi = max(key, self.max_key)
        if not self.bins:
            self.bins = [0] * self._wanted_length(lo, hi)
            self.offset = lo
            self._place(lo, hi)
        elif lo >= self.min_key and hi < self.offset + len(self.bins):
            self.min_key, self.max_key = lo, hi
        else:
            wanted = self._wanted_length(lo, hi)
            if wanted > len(self.bins):
                self.bins.extend([0] * (wanted - len(self.bins)))
            self._place(lo, hi)

    def _place(self, lo: int, hi: int) -> None:
        length = len(self.bins)
        if hi - lo + 1 <= length:
            middle = lo + (hi - lo + 1) // 2
            self._shift(self.offset + length // 2 - middle)
            self.min_key, self.max_key = lo, hi
            return
        # the range does not fit: fold the lowest keys into the lowest key that still fits
        lo = hi - length + 1
        if lo >= self.max_key:
            self.offset = self.min_key = lo
            self.bins = [0] * length
            self.bins[0] = self.count
        else:
            if lo > self.offset:
                start, stop = self.min_key - self.offset, lo - self.offset
                folded = sum(self.bins[start:stop])
                for i in range(start, stop):
                    self.bins[i] = 0
                self.bins[stop] += folded
            self.min_key = lo
            self._shift(self.offset - lo)
        self.max_key = hi
        self.collapsed = True

    def _shift(self, shift: int) -> None:
        """Move the contents ``shift`` slots up (down when negative); the window start moves
        the other way so every key keeps its count."""
        if abs(shift) >= len(self.bins):
            self.bins = [0] * len(self.bins)
        elif shift > 0:
            self.bins = [0] * shift + self.bins[: len(self.bins) - shift]
        elif shift < 0:
            self.bins = self.bins[-shift:] + [0] * (-shift)
        self.offset -= shift

    def key_at_rank(self, rank: int) -> int:
        """Key of the first slot whose running count exceeds ``rank``."""
        if rank < 0:
            return self.min_key
        # the running counts in C, once for the report's five quantiles of a store, then the
        # first slot above rank by bisection
        running = self._running
        if running is None:
            running = self._running = list(accumulate(self.bins))
        index = bisect_right(running, rank)
        if index < len(running):
            return self.offset + index
        return self.max_key


class DDSketch:
    """DDSketch with the ``ddsketchy`` crate's mapping and quantile rule.

    gamma = 1 + 2a/(1 - a); a positive value v >= ``min_indexable`` goes to key
    ceil(ln(v) / ln(gamma)) and a key k reads back as exp(k * ln(gamma)) * 2/(1 + gamma);
    negatives use a mirrored store; |v| below ``min_indexable`` (about 2.2e-308, so in practice
    exact zeros) is counted in a zero bucket that reads back as 0.0. Non-finite values are
    ignored.
    """

    __slots__ = ("alpha", "gamma", "multiplier", "log_gamma", "min_indexable", "positive",
                 "negative", "zero_count", "min", "max", "_key_cache")

    def __init__(self, alpha: float = RELATIVE_ACCURACY, max_bins: int = MAX_BINS) -> None:
        if not (math.isfinite(alpha) and 0.0 < alpha < 1.0):
            raise ValueError("alpha must be in (0, 1)")
        self.alpha = alpha
        self.gamma = 1.0 + (2.0 * alpha) / (1.0 - alpha)
        self.multiplier = 1.0 / math.log1p((2.0 * alpha) / (1.0 - alpha))  # 1 / ln(gamma)
        self.log_gamma = 1.0 / self.multiplier  # read-back uses the reciprocal of the multiplier
        from_range = math.exp(-(2.0**31) / self.multiplier + 1.0)
        self.min_indexable = max(from_range, 2.2250738585072014e-308 * self.gamma)
        self.positive = _Store(max_bins)
        self.negative = _Store(max_bins)
        self.zero_count = 0
        self.min = math.inf
        self.max = -math.inf
        self._key_cache: dict[float, int] = {}

    def key(self, value: float) -> int:
        """Key of a magnitude >= ``min_indexable``."""
        key = self._key_cache.get(value)
        if key is None:
            key = math.ceil(math.log(value) * self.multiplier)
            if len(self._key_cache) < 65536:
                self._key_cache[value] = key
        return key

    def value(self, key: int) -> float:
        return math.exp(key * self.log_gamma) * (2.0 / (1.0 + self.gamma))

    @property
    def count(self) -> int:
        return self.positive.count + self.negative.count + self.zero_count

    def add(self, value: float, count: int = 1) -> None:
        if count <= 0 or not math.isfinite(value):
            return
        if value >= self.min_indexable:
            self.positive.add(self.key(value), count)
        elif value <= -self.min_indexable:
            self.negative.add(self.key(-value), count)
        else:
            self.zero_count += count
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    def quantile(self, q: float) -> float:
        if not 0.0 <= q <= 1.0:
            raise ValueError("quantile must be in [0, 1]")
        total = self.count
        if total == 0:
            return 0.0
        if total == 1:
            return self.min
        rank = int(q * (total - 1.0))
        below_zero = self.negative.count
        if rank < below_zero:
            return -self.value(self.negative.key_at_rank(below_zero - 1 - rank))
        if rank < below_zero + self.zero_count:
            return 0.0
        return self.value(self.positive.key_at_rank(rank - below_zero - self.zero_count))


class HistogramSummary(NamedTuple):
    """What a distribution keeps of a histogram of (value, multiplicity) pairs: the exact
    moments (``Welford.from_counts``) and the sketch's content, the positive store's keys in
    ascending order with their counts and, in pair order, the values below the sketch's lowest
    indexable one (zeros, negatives), which go through ``DDSketch.add``.

    ``aisimulate_core.token_stats`` computes the same summary in C for the report's gaps."""

    count: int
    mean: float
    m2: float
    min: float
    max: float
    keys: Sequence[int]
    key_counts: Sequence[int]
    low_values: Sequence[float]
    low_counts: Sequence[int]


def summarize_counts(items: Iterable[tuple[float, int]], multiplier: float,
                     min_indexable: float) -> HistogramSummary:
    """The summary of the pairs with a positive count and a finite value, for a sketch with
    this key ``multiplier`` and lowest indexable value."""
    pairs = [(v, c) for v, c in items if c > 0 and math.isfinite(v)]
    # bin first, then feed the store once per bin: a replay has one value per engine pass
    log = math.log
    ceil = math.ceil
    bins: dict[int, int] = {}
    low_values: list[float] = []
    low_counts: list[int] = []
    for value, count in pairs:
        if value >= min_indexable:
            key = ceil(log(value) * multiplier)
            bins[key] = bins.get(key, 0) + count
        else:
            low_values.append(value)
            low_counts.append(count)
    moments = Welford.from_counts(pairs)
    keys = sorted(bins)
    return HistogramSummary(moments.count, moments.mean, moments.m2, moments.min, moments.max,
                            keys, [bins[key] for key in keys], low_values, low_counts)


class StreamingDistribution:
    """Exact moments and extremes beside a DDSketch, as the reference keeps ITL and per-user rate.

    Percentiles keep the exact statistics' rounded rank: with span = n - 1 and
    r = round(span * p / 100), the sketch is asked for quantile (r + 0.5) / span, or 1.0 when
    span is 0 or r >= span.
    """

    __slots__ = ("moments", "sketch")

    def __init__(self, alpha: float = RELATIVE_ACCURACY, max_bins: int = MAX_BINS) -> None:
        self.moments = Welford()
        self.sketch = DDSketch(alpha, max_bins)

    @property
    def count(self) -> int:
        return self.moments.count

    def add(self, value: float, count: int = 1) -> None:
        if count <= 0 or not math.isfinite(value):
            return
        self.sketch.add(value, count)
        self.moments.add(value, count)

    @classmethod
    def from_counts(cls, items: Iterable[tuple[float, int]], alpha: float = RELATIVE_ACCURACY,
                    max_bins: int = MAX_BINS) -> "StreamingDistribution":
        """A distribution holding a histogram of (value, multiplicity) pairs."""
        dist = cls(alpha, max_bins)
        sketch = dist.sketch
        dist.fill(summarize_counts(items, sketch.multiplier, sketch.min_indexable))
        return dist

    def fill(self, summary: "HistogramSummary") -> None:
        """Load a histogram's summary into this empty distribution (the sketch's store gets
        one add per key, in ascending order)."""
        sketch = self.sketch
        for value, count in zip(summary.low_values, summary.low_counts):
            sketch.add(value, count)
        add = sketch.positive.add
        for key, count in zip(summary.keys, summary.key_counts):
            add(key, count)
        if summary.count:
            sketch.min = min(sketch.min, summary.min)
            sketch.max = max(sketch.max, summary.max)
        moments = self.moments
        moments.count, moments.mean, moments.m2 = summary.count, summary.mean, summary.m2
        moments.min, moments.max = summary.min, summary.max

    def percentile(self, pct: float) -> float:
        return self.sketch.quantile(sketch_q(self.moments.count - 1, pct))

    def stats(self) -> DistributionStats:
        m = self.moments
        if m.count == 0:
            return EMPTY_STATS
        picks = [self.percentile(pct) for pct in PERCENTILES]
        return DistributionStats(m.mean, m.min, m.max, *picks, m.std)


# The default sketch's mapping (the report's ITL and per-user rate sketches), read off one
# DDSketch so the constants are the ones its methods use.
_DEFAULT_SKETCH = DDSketch()
KEY_MULTIPLIER = _DEFAULT_SKETCH.multiplier      # key = ceil(ln(v) * KEY_MULTIPLIER)
MIN_INDEXABLE = _DEFAULT_SKETCH.min_indexable    # smaller magnitudes: the zero bucket
_LOG_GAMMA = _DEFAULT_SKETCH.log_gamma
_KEY_SCALE = 2.0 / (1.0 + _DEFAULT_SKETCH.gamma)


def sketch_q(span: int, pct: float) -> float:
    """The sketch quantile ``StreamingDistribution.percentile`` reads for ``pct`` among
    ``span + 1`` values."""
    if span <= 0:
        return 1.0
    rank = round_half_away(span * pct / 100.0)
    return 1.0 if rank >= span else (rank + 0.5) / span


@lru_cache(maxsize=256)
def _percentile_qs(span: int) -> tuple[float, ...]:
    """``sketch_q`` of each of PERCENTILES (a report's histograms often share a count)."""
    return tuple(sketch_q(span, pct) for pct in PERCENTILES)


def summary_stats(summary: HistogramSummary) -> DistributionStats:
    """``StreamingDistribution().fill(summary)`` then ``.stats()`` (default sketch), without
    building the sketch's stores: the summary's keys come sorted, so the positive store's
    quantile is a bisection of their running counts.

    What the dense store would do to them: it folds a key span wider than its bins
    (``MAX_BINS``) into its lowest kept key, ``max key - MAX_BINS + 1``, and nothing else
    changes which key a rank reads. A summary with values for the negative store takes the
    sketch itself."""
    count = summary.count
    if count == 0:
        return EMPTY_STATS
    low_values = summary.low_values
    if low_values and min(low_values) <= -MIN_INDEXABLE:
        dist = StreamingDistribution()
        dist.fill(summary)
        return dist.stats()
    keys = summary.keys
    running = list(accumulate(summary.key_counts))
    zeros = sum(summary.low_counts)
    total = zeros + (running[-1] if running else 0)
    floor = keys[-1] - MAX_BINS + 1 if keys and keys[-1] - keys[0] >= MAX_BINS else None
    minimum = summary.min   # the sketch's min: every value went through it
    picks = []
    for q in _percentile_qs(count - 1):
        # StreamingDistribution.percentile's q, then DDSketch.quantile's rank
        if total == 0:
            picks.append(0.0)
            continue
        if total == 1:
            picks.append(minimum)
            continue
        rank = int(q * (total - 1.0)) - zeros
        if rank < 0:
            picks.append(0.0)
            continue
        index = bisect_right(running, rank)
        key = keys[index] if index < len(running) else keys[-1]
        if floor is not None and key < floor:
            key = floor
        picks.append(math.exp(key * _LOG_GAMMA) * _KEY_SCALE)
    m2 = summary.m2
    return DistributionStats(summary.mean, summary.min, summary.max, *picks,
                             math.sqrt(m2 / count))

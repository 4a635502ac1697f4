"""The report's inter-token gaps: each rank's pass arrays in, the ITL and per-user rate
distributions' figures out, with no Python object per pass.

A ``TokenGaps`` holds one count per distinct *sample* gap, in the order gaps are first seen:
a gap is a sample unless it is NaN or +inf, and a negative gap (or -inf) counts as 0.0, which
the reference clamps it to. ``add_passes`` takes a whole rank (its pass end times, the
difference array of gap multiplicities and its break gaps) in one call; ``add`` takes
(value, count) pairs; ``gaps`` hands the distinct gaps back as arrays; ``summaries`` gives the
two ``stats.HistogramSummary`` the report's sketches are built from: the ITL (every gap) and
the per-user rate (1000 / gap for each distinct positive gap, so equal rates of different gaps
stay separate pairs, as they were when the report summed ``rate * count`` per gap).

The summaries are those of ``stats.summarize_counts`` over the pairs (gap, total count), in
first-seen order: exact ``math.fsum`` moments, the positive-store keys of the DDSketch and the
values below its lowest indexable one. They depend only on each distinct gap's total count,
not on how the totals were reached, which is why merging per rank first and then across ranks
gives the report it gave when one dict merged everything.

``TokenGaps()`` builds the backend chosen by ``aisimulate_core.native``; ``backend="python"``
or ``"c"`` forces one. Both raise the same errors: counts handed back must fit an int64, a
break must name passes that have an end time, and a sum that overflows a double (``math.fsum``'s
"intermediate overflow") is a ``NativeArgumentError``.
"""

from __future__ import annotations

import math
from array import array
from itertools import accumulate, chain, islice
from operator import sub

from .native import EINVAL, ffi, handle_view, lib, open_handle, resolve_backend, status_error
from .stats import HistogramSummary, summarize_counts

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_MAX_MULTIPLIER = 2.0**52  # keys stay far inside an int64 (|log| of a double < 745)

# failures, as csrc/token_stats.cdef.h numbers them
COUNT_OVERFLOW = 1
FSUM_OVERFLOW = 2
FSUM_INF_NAN = 3
BAD_BREAK = 4
BAD_SKETCH = 5

_OPERATION = "token statistics"
_FAILURES = {
    COUNT_OVERFLOW: "a count of token gaps does not fit 64 bits",
    FSUM_OVERFLOW: "a sum of token gaps overflows a double (intermediate overflow in fsum)",
    FSUM_INF_NAN: "-inf + inf in a sum of token gaps",
    BAD_BREAK: "a break between stretches names a pass with no end time",
    BAD_SKETCH: "the sketch's multiplier must be in (0, 2**52] and its lowest indexable "
                "value positive and finite",
}


def failure_error(failure):
    """The exception both backends raise for one of the failures above."""
    return status_error(EINVAL, _OPERATION, _FAILURES[failure])


def _doubles(values):
    return values if isinstance(values, array) and values.typecode == "d" else array("d", values)


def _int64s(values):
    return values if isinstance(values, array) and values.typecode == "q" else array("q", values)


def _break_arrays(breaks):
    """(last, first) -> count as two int64 arrays: the pairs flattened, the counts."""
    if not breaks:
        return array("q"), array("q")
    return array("q", chain.from_iterable(breaks)), array("q", breaks.values())


def _check_sketch(multiplier, min_indexable):
    if not (0.0 < multiplier <= _MAX_MULTIPLIER and 0.0 < min_indexable < math.inf):
        raise failure_error(BAD_SKETCH)


class TokenGaps:
    """Factory and common type of both implementations."""

    __slots__ = ()
    backend = None

    def __new__(cls, backend=None):
        if cls is TokenGaps:
            cls = CTokenGaps if resolve_backend(backend) == "c" else PyTokenGaps
        return object.__new__(cls)


class CTokenGaps(TokenGaps):
    """The histogram in C (csrc/token_stats.c): a hash table of doubles to counts."""

    __slots__ = ("_handle", "_view")
    backend = "c"

    def __init__(self, backend=None):
        self._handle = open_handle("aisim_token_stats", lib.aisim_ts_new, lib.aisim_ts_free,
                                   "TokenGaps()")
        self._view = handle_view(self._handle, "aisim_ts_view", lib.aisim_ts_view_of)

    def __len__(self):
        return self._view.len

    def _check(self, status):
        if status == EINVAL and self._view.failure:
            raise failure_error(self._view.failure)
        if status:
            raise status_error(status, _OPERATION)

    def add_passes(self, ends, diff, breaks=None):
        ends, diff = _doubles(ends), _int64s(diff)
        pairs, counts = _break_arrays(breaks)
        self._check(lib.aisim_ts_add_passes(
            self._handle, ffi.from_buffer("double[]", ends), len(ends),
            ffi.from_buffer("int64_t[]", diff), len(diff), ffi.from_buffer("int64_t[]", pairs),
            ffi.from_buffer("int64_t[]", counts), len(counts)))

    def add(self, values, counts):
        values, counts = _doubles(values), _int64s(counts)
        self._check(lib.aisim_ts_add_gaps(
            self._handle, ffi.from_buffer("double[]", values),
            ffi.from_buffer("int64_t[]", counts), min(len(values), len(counts))))

    def gaps(self):
        n = self._view.len
        values, counts = array("d", bytes(8 * n)), array("q", bytes(8 * n))
        self._check(lib.aisim_ts_gaps(self._handle, ffi.from_buffer("double[]", values),
                                      ffi.from_buffer("int64_t[]", counts), n))
        return values, counts

    def summaries(self, multiplier, min_indexable):
        _check_sketch(multiplier, min_indexable)
        self._check(lib.aisim_ts_summarize(self._handle, multiplier, min_indexable))
        view = self._view
        return _summary(view.itl), _summary(view.rate)


def _summary(dist):
    return HistogramSummary(
        dist.count, dist.mean, dist.m2, dist.min, dist.max,
        ffi.unpack(dist.keys, dist.n_keys), ffi.unpack(dist.key_counts, dist.n_keys),
        ffi.unpack(dist.low_values, dist.n_low), ffi.unpack(dist.low_counts, dist.n_low))


class PyTokenGaps(TokenGaps):
    """The twin on a dict (value -> Python int count): the reference semantics."""

    __slots__ = ("_totals",)
    backend = "python"

    def __init__(self, backend=None):
        self._totals = {}

    def __len__(self):
        return len(self._totals)

    def add_passes(self, ends, diff, breaks=None):
        ends, diff = _doubles(ends), _int64s(diff)
        pairs, counts = _break_arrays(breaks)
        n = len(ends)
        if pairs and not (0 <= min(pairs) and max(pairs) < n):
            raise failure_error(BAD_BREAK)
        # a pass whose running count is 0 adds nothing; a break always makes its entry
        passes = ((gap, count)
                  for gap, count in zip(map(sub, islice(ends, 1, None), ends), accumulate(diff))
                  if count)
        self._add_samples(passes)
        self._add_samples((ends[pairs[2 * i + 1]] - ends[pairs[2 * i]], count)
                          for i, count in enumerate(counts))

    def add(self, values, counts):
        self._add_samples(zip(_doubles(values), _int64s(counts)))

    def _add_samples(self, pairs):
        totals = self._totals
        get = totals.get
        inf = math.inf
        for gap, count in pairs:
            if not gap > 0.0:
                if gap != gap:  # NaN: not a sample
                    continue
                gap = 0.0  # the reference clamps negative gaps to 0
            elif gap == inf:
                continue
            totals[gap] = get(gap, 0) + count

    def gaps(self):
        totals = self._totals
        if totals and not (INT64_MIN <= min(totals.values()) and max(totals.values()) <= INT64_MAX):
            raise failure_error(COUNT_OVERFLOW)
        return array("d", totals), array("q", totals.values())

    def summaries(self, multiplier, min_indexable):
        _check_sketch(multiplier, min_indexable)
        items = self._totals.items()
        itl = _summarize([(gap, count) for gap, count in items if count > 0],
                         multiplier, min_indexable)
        # a zero gap is an ITL sample but has no finite per-user rate
        rates = [(1000.0 / gap, count) for gap, count in items if gap > 0.0]
        rate = _summarize([(r, c) for r, c in rates if c > 0 and math.isfinite(r)],
                          multiplier, min_indexable)
        return itl, rate


def _summarize(pairs, multiplier, min_indexable):
    """``summarize_counts`` with the C side's limits: the total must fit an int64, and a sum
    that overflows is an argument error rather than ``math.fsum``'s bare exception."""
    if sum(count for _, count in pairs) > INT64_MAX:
        raise failure_error(COUNT_OVERFLOW)
    try:
        return summarize_counts(pairs, multiplier, min_indexable)
    except OverflowError:
        raise failure_error(FSUM_OVERFLOW) from None
    except ValueError:  # math.fsum's "-inf + inf": not reachable with gaps >= 0
        raise failure_error(FSUM_INF_NAN) from None

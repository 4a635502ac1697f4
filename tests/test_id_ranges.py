"""A synthetic prompt's ids from their ranges: the C fill (csrc/id_ranges.c) against the loop."""

from __future__ import annotations

import random
from array import array

import pytest

from aisimulate_core import native
from aisimulate_core.workload import prompt
from aisimulate_core.workload.prompt import IdRanges


def loop_fill(ranges, stop):
    out, left = array("I"), sum(c for _, c in ranges) if stop is None else max(0, stop)
    for first, count in ranges:
        take = min(count, left)
        out.extend(range(first, first + take))
        left -= take
    return out


@pytest.mark.skipif(native.lib is None, reason="the C core is not built")
@pytest.mark.parametrize("seed", range(5))
def test_c_fill_matches_the_loop(seed):
    rng = random.Random(seed)
    for _ in range(400):
        ranges = tuple((rng.choice([0, rng.randrange(2**32 - 4000), 2**32 - 1]),
                        rng.randrange(0, 3000)) for _ in range(rng.randrange(0, 4)))
        stop = rng.choice([None, 0, rng.randrange(0, 9000)])
        try:
            want = loop_fill(ranges, stop)
        except OverflowError:
            with pytest.raises(OverflowError):   # ids past u32: the loop's own error
                IdRanges(ranges)[:stop]
            total = sum(c for _, c in ranges)
            assert prompt._c_fill(ranges, total if stop is None else min(total, stop)) is None
            continue
        assert IdRanges(ranges)[:stop] == want
        assert prompt._c_fill(ranges, len(want)) == want

"""runtime/pass_time.py: the worker seconds of a disaggregated run, the C merge against its
Python twin (a sort of the concatenated runs), bit for bit on seeded random runs."""

import random
from array import array

import pytest

from aisimulate_core import native
from aisimulate_core.runtime.pass_time import _sums_c, _sums_py, time_sums

needs_c = pytest.mark.skipif(native.lib is None, reason="the C backend is not built")


def _runs(rng):
    """Time-ordered runs as the loop makes them: a list of visited times and each rank's pass
    ends (arrays), with repeated times within and across runs, and some empty runs."""
    grid = [round(rng.uniform(0, 5e4), rng.choice((0, 1, 3))) for _ in range(rng.randint(0, 400))]
    runs = []
    for k in range(rng.randint(1, 7)):
        picked = sorted(rng.sample(grid, rng.randint(0, len(grid))) if grid else [])
        if picked and rng.random() < 0.3:
            picked += [picked[-1]] * rng.randint(1, 3)     # a time seen twice
        runs.append(picked if k == 0 else array("d", picked))
    return runs


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_the_c_merge_sums_as_the_sort_does(seed):
    rng = random.Random(seed)
    runs = _runs(rng)
    workers = [rng.randint(0, 16) for _ in range(rng.randint(1, 3))]
    c = _sums_c(runs, workers)
    assert c is not None
    assert c == _sums_py(runs, workers)     # exact: the same additions in the same order


@needs_c
def test_a_run_out_of_order_takes_the_python_path():
    runs = [[1.0, 3.0], array("d", [5.0, 2.0, 7.5])]
    assert _sums_c(runs, [2]) is None
    assert time_sums(runs, [2], backend="c") == _sums_py(runs, [2])
    assert time_sums(runs, [2], backend="c")[0] == pytest.approx(2 * 7.5 / 1000)


def test_no_times_and_no_pools():
    assert time_sums([[], array("d")], [3, 1]) == [0.0, 0.0]
    assert time_sums([[1.0]], []) == []


def test_the_sum_follows_time_order_not_run_order():
    # advances 0.1, 0.2 then 1e16-sized steps: the order of the additions shows in the bits
    runs = [[0.1, 1e16], array("d", [0.30000000000000004, 1e16 + 2.0])]
    expected = 0.0
    last = 0.0
    for t in sorted([0.1, 1e16, 0.30000000000000004, 1e16 + 2.0]):
        expected = expected + 3 * (t - last) / 1000.0
        last = t
    assert time_sums(runs, [3]) == [expected]
    assert time_sums(runs, [3], backend="python") == [expected]

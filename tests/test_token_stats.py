"""The report's token-gap statistics (aisimulate_core.token_stats): the C histogram against its
Python twin on seeded random pass arrays, both against the dict pipeline the report used
before (``RankBase.itl_gaps`` -> ``Collector.add_itl_gaps`` -> ``from_counts``), and whole
runs whose ITL figures must not depend on the backend."""

from __future__ import annotations

import math
import random
import struct
from array import array
from itertools import accumulate, islice
from operator import sub

import pytest

from aisimulate_core import native
from aisimulate_core.errors import NativeArgumentError
from aisimulate_core.report import Collector
from aisimulate_core.runtime.build import build_simulation
from aisimulate_core.spec import load_payload
from aisimulate_core.stats import DDSketch, StreamingDistribution
from aisimulate_core.token_stats import CTokenGaps, PyTokenGaps, TokenGaps
from reference import ROOT

pytestmark = pytest.mark.skipif(native.lib is None, reason="the C core is not built")

SKETCH = DDSketch()
MAPPING = (SKETCH.multiplier, SKETCH.min_indexable)
SPECIAL = (0.0, -0.0, -1.5, math.nan, math.inf, -math.inf, 5e-324, 1e-310, 1e300)


def bits(x):
    """A float's identity for comparison: -0.0 differs from 0.0 and NaN equals NaN."""
    return struct.pack("<d", x)


def same_summary(a, b):
    assert (a.count, a.keys, a.key_counts, a.low_counts) == (b.count, b.keys, b.key_counts,
                                                              b.low_counts)
    assert [bits(x) for x in (a.mean, a.m2, a.min, a.max, *a.low_values)] == \
        [bits(x) for x in (b.mean, b.m2, b.min, b.max, *b.low_values)]


def same_gaps(c, py):
    c_values, c_counts = c.gaps()
    py_values, py_counts = py.gaps()
    assert c_values.tobytes() == py_values.tobytes()
    assert c_counts == py_counts
    assert len(c) == len(py) == len(c_values)


def outcome(call):
    """What a call gave: its value, or its exception's type and message."""
    try:
        return "ok", call()
    except Exception as exc:  # noqa: BLE001 - the twins must fail alike
        return type(exc), str(exc)


def random_rank(rng):
    """One rank's pass history: end times with repeated, special and adversarial gaps, a
    difference array (small, sometimes huge, sometimes negative entries) and break gaps."""
    n = rng.choice((0, 1, 2, rng.randint(3, 40), rng.randint(40, 400)))
    palette = [rng.choice((0.25, 1.0, 3.5, 12.0, 1e-3, 7e5)) for _ in range(4)]
    ends, t = array("d"), rng.uniform(-5.0, 100.0)
    for _ in range(n):
        ends.append(t)
        roll = rng.random()
        if roll < 0.5:
            t += rng.choice(palette)  # many passes share a gap
        elif roll < 0.6:
            t += rng.choice(SPECIAL)
        elif roll < 0.7:
            t += rng.choice((1e16, 1.0, 1e-16)) * rng.choice((1, -1))  # fsum's hard cases
        else:
            t += rng.uniform(0.0, 50.0)
        if t != t or abs(t) == math.inf:  # keep later gaps meaningful after a special one
            t = rng.uniform(0.0, 1e4)
    # requests' stretches as the engines record them (+w at the first pass, -w at the last),
    # some with weights past 2^53 (a double no longer holds every count), and some noise
    diff = array("q", bytes(8 * max(0, n - rng.choice((0, 0, 1, 5)))))
    for _ in range(rng.randint(0, 3 * len(diff))):
        first = rng.randrange(len(diff))
        huge = rng.random() < 0.1
        last = min(len(diff) - 1, first + rng.randint(0, 6 if huge else 60))
        weight = rng.randint(2**50, 2**54) if huge else 1
        diff[first] += weight
        diff[last] -= weight
    for _ in range(rng.choice((0, 0, 2))):
        if diff:
            diff[rng.randrange(len(diff))] += rng.randint(-3, 3)
    breaks = {}
    for _ in range(rng.choice((0, 0, 1, 6))):
        if n:
            key = (rng.randrange(n), rng.randrange(n))
            breaks[key] = breaks.get(key, 0) + rng.choice((1, 2, 2**40))
    return ends, diff, breaks


def old_rank_gaps(ends, diff, breaks):
    """``RankBase.itl_gaps`` as it was: raw gaps in a dict, first seen first."""
    counts = {}
    for gap, count in zip(map(sub, islice(ends, 1, None), ends), accumulate(diff)):
        if count:
            counts[gap] = counts.get(gap, 0) + count
    for (last, first), count in breaks.items():
        gap = ends[first] - ends[last]
        counts[gap] = counts.get(gap, 0) + count
    return list(counts), list(counts.values())


def old_distributions(ranks):
    """The collector's merge and ``_token_distributions`` as they were."""
    merged = {}
    for ends, diff, breaks in ranks:
        for gap, count in zip(*old_rank_gaps(ends, diff, breaks)):
            merged[gap] = merged.get(gap, 0) + count
    itl = {}
    for gap, count in merged.items():
        if gap != gap or gap == math.inf:
            continue
        gap = gap if gap > 0.0 else 0.0
        itl[gap] = itl.get(gap, 0) + count
    rates = [(1000.0 / gap, count) for gap, count in itl.items() if gap > 0.0]
    return (StreamingDistribution.from_counts(itl.items()),
            StreamingDistribution.from_counts(rates))


def new_distributions(ranks, backend):
    total = TokenGaps(backend)
    for ends, diff, breaks in ranks:
        rank = TokenGaps(backend)
        rank.add_passes(ends, diff, breaks)
        total.add(*rank.gaps())
    itl, rate = StreamingDistribution(), StreamingDistribution()
    itl_summary, rate_summary = total.summaries(*MAPPING)
    itl.fill(itl_summary)
    rate.fill(rate_summary)
    return itl, rate


def figures(dist):
    return [bits(x) for x in dist.stats()] + [dist.count]


def test_factory_follows_the_backend_choice():
    assert TokenGaps().backend == native.BACKEND
    assert isinstance(TokenGaps("c"), CTokenGaps)
    assert isinstance(TokenGaps("python"), PyTokenGaps)


@pytest.mark.parametrize("seed", range(40))
def test_c_and_python_twins_agree_on_random_ranks(seed):
    rng = random.Random(seed)
    totals = {"c": CTokenGaps(), "python": PyTokenGaps()}
    for _ in range(rng.randint(1, 5)):
        ends, diff, breaks = random_rank(rng)
        ranks = {"c": CTokenGaps(), "python": PyTokenGaps()}
        for gaps in ranks.values():
            gaps.add_passes(ends, diff, breaks)
        same_gaps(ranks["c"], ranks["python"])
        for backend, gaps in ranks.items():
            totals[backend].add(*gaps.gaps())
    same_gaps(totals["c"], totals["python"])
    c_itl, c_rate = totals["c"].summaries(*MAPPING)
    py_itl, py_rate = totals["python"].summaries(*MAPPING)
    same_summary(c_itl, py_itl)
    same_summary(c_rate, py_rate)


@pytest.mark.parametrize("seed", range(40, 70))
def test_both_backends_give_the_figures_of_the_old_dict_pipeline(seed):
    rng = random.Random(seed)
    # small counts here (any sign: the old pipeline took them too), so that no count
    # overflows 64 bits, which the old pipeline's Python integers allowed
    ranks = []
    for _ in range(rng.randint(1, 4)):
        ends, diff, breaks = random_rank(rng)
        diff = array("q", (d % 7 for d in diff))
        ranks.append((ends, diff, {k: v % 5 + 1 for k, v in breaks.items()}))
    old_itl, old_rate = old_distributions(ranks)
    for backend in ("c", "python"):
        itl, rate = new_distributions(ranks, backend)
        assert figures(itl) == figures(old_itl)
        assert figures(rate) == figures(old_rate)


def test_equal_rates_of_different_gaps_stay_separate_pairs():
    # 1000 / gap rounds two neighbouring gaps to one rate: summing rate * count per gap (not
    # per rate) is what the report did, and with a count past 2^53 the mean shows it
    a = 1.9990000000000077
    b = math.nextafter(a, 3.0)
    rate = 1000.0 / a
    assert rate == 1000.0 / b
    counts = (3, 2**53 + 1, 7)
    per_gap = math.fsum([rate * 3, rate * (2**53 + 1), 1000.0 / 3.0 * 7]) / sum(counts)
    per_rate = math.fsum([rate * (3 + 2**53 + 1), 1000.0 / 3.0 * 7]) / sum(counts)
    assert per_gap != per_rate
    for backend in ("c", "python"):
        gaps = TokenGaps(backend)
        gaps.add([a, b, 3.0], counts)
        assert gaps.summaries(*MAPPING)[1].mean == per_gap


def test_the_sum_is_exact_where_a_running_sum_is_not():
    values, counts = [1e16, 1.0, 1e-16], [1, 1, 1]  # CPython's half-even example
    for backend in ("c", "python"):
        gaps = TokenGaps(backend)
        gaps.add(values, counts)
        itl, _ = gaps.summaries(*MAPPING)
        assert itl.mean == 1.0000000000000002e16 / 3 == math.fsum(values) / 3
        assert itl.mean != sum(values) / 3


def test_samples_clamp_and_special_gaps_drop():
    for backend in ("c", "python"):
        gaps = TokenGaps(backend)
        gaps.add([-2.0, 5.0, math.nan, -math.inf, math.inf, -0.0, 5.0], [1, 2, 3, 4, 5, 6, 7])
        values, counts = gaps.gaps()
        assert [bits(v) for v in values] == [bits(0.0), bits(5.0)]
        assert list(counts) == [1 + 4 + 6, 2 + 7]
        itl, rate = gaps.summaries(*MAPPING)
        assert (itl.count, itl.low_values, itl.low_counts) == (20, [0.0], [11])
        assert (rate.count, rate.min, rate.max) == (9, 200.0, 200.0)


def test_a_zero_total_keeps_its_place_but_is_no_sample():
    for backend in ("c", "python"):
        gaps = TokenGaps(backend)
        gaps.add([4.0, 2.0, 4.0], [3, 1, -3])
        assert list(gaps.gaps()[0]) == [4.0, 2.0]
        itl, _ = gaps.summaries(*MAPPING)
        assert (itl.count, itl.min, itl.max, itl.mean) == (1, 2.0, 2.0, 2.0)


def test_an_empty_histogram_summarizes_to_nothing():
    for backend in ("c", "python"):
        gaps = TokenGaps(backend)
        gaps.add_passes(array("d"), array("q"), {})
        assert len(gaps) == 0
        itl, rate = gaps.summaries(*MAPPING)
        for summary in (itl, rate):
            assert tuple(summary) == (0, 0.0, 0.0, math.inf, -math.inf, [], [], [], [])


@pytest.mark.parametrize("case", ["bad_break", "count_overflow", "sum_overflow", "bad_sketch",
                                  "total_overflow"])
def test_both_backends_fail_alike(case):
    def run(backend):
        gaps = TokenGaps(backend)
        if case == "bad_break":
            return gaps.add_passes(array("d", [0.0, 1.0]), array("q", [1]), {(0, 2): 1})
        if case == "count_overflow":
            gaps.add([1.0, 1.0], [2**62, 2**62])
            return gaps.gaps()
        if case == "total_overflow":
            gaps.add([1.0, 2.0], [2**62, 2**62])
            return gaps.summaries(*MAPPING)
        if case == "sum_overflow":
            gaps.add([1e308, 1.5e308], [1, 1])
            return gaps.summaries(*MAPPING)
        return gaps.summaries(math.nan, SKETCH.min_indexable)

    c, python = outcome(lambda: run("c")), outcome(lambda: run("python"))
    assert c == python
    assert c[0] is NativeArgumentError
    assert c[1].startswith("token statistics: ")


def test_a_failed_break_changes_nothing():
    for backend in ("c", "python"):
        gaps = TokenGaps(backend)
        gaps.add([1.0], [1])
        with pytest.raises(NativeArgumentError):
            gaps.add_passes(array("d", [0.0, 2.0]), array("q", [1]), {(5, 0): 1})
        assert list(gaps.gaps()[1]) == [1]


def test_a_large_histogram_is_summed_in_c_like_the_twin():
    # more distinct gaps than the table's first sizes, with keys spread over the dense range
    rng = random.Random(7)
    values = [rng.lognormvariate(2.0, 2.0) for _ in range(20_000)]
    counts = [rng.randint(1, 2**40) for _ in values]
    c, py = CTokenGaps(), PyTokenGaps()
    for gaps in (c, py):
        gaps.add(values, counts)
    same_gaps(c, py)
    for a, b in zip(c.summaries(*MAPPING), py.summaries(*MAPPING)):
        same_summary(a, b)


# ------------------------------------------------------------------------------ whole runs

PAYLOADS = ("vllm_kv_pressure_lifo.json", "vllm_2workers_dp2.json",
            "disagg_decode_preemption.json", "sglang_poisson_pressure_polynomial.json")


def run_to_end(name):
    path = ROOT / "tests" / "fixtures" / "payloads" / name
    sim = build_simulation(load_payload(path.read_text()))
    sim.run()
    return sim


@pytest.mark.parametrize("name", PAYLOADS)
def test_a_run_gives_the_same_itl_figures_on_both_backends_and_as_before(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # payloads name their traces from the checkout's root
    sim = run_to_end(name)
    ranks = [rank for worker in sim.workers for rank in worker.ranks]
    history = [(rank.pass_ends, rank.itl_diff, rank.break_gaps) for rank in ranks]
    assert sum(len(ends) for ends, _, _ in history) > 20
    keys = [k for k in sim.report().summary if "_itl_" in k or "per_user" in k]
    summaries = []
    for backend in ("c", "python"):
        collector = Collector(record_per_request=False, backend=backend)
        for rank in ranks:
            collector.add_itl_gaps(*rank.itl_gaps(backend))
        summary = collector.finalize(wall_time_ms=1.0).summary
        summaries.append([bits(summary[k]) for k in keys])
    old_itl, old_rate = old_distributions(history)
    old = [bits(x) for x in (*old_itl.stats(), *old_rate.stats())]
    assert summaries[0] == summaries[1] == old

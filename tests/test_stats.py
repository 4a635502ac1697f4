import math
from array import array
import random
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

import pytest

from aisimulate_core.stats import (
    EMPTY_STATS,
    DDSketch,
    MAX_BINS,
    SortedRuns,
    StreamingDistribution,
    Welford,
    _Store,
    exact_stats,
    mean,
    percentile,
    population_std,
    rank_index,
    round_half_away,
    seq_sum,
    summarize_counts,
    summary_stats,
)

ALPHA = 0.001


# ------------------------------------------------------------------ rounding, ranks, percentiles


@pytest.mark.parametrize("x, expected", [
    (0.0, 0.0), (0.5, 1.0), (1.5, 2.0), (2.5, 3.0), (2.4999999999999996, 2.0),
    (0.49999999999999994, 0.0), (-0.5, -1.0), (-2.5, -3.0), (7.0, 7.0), (1e17, 1e17),
])
def test_round_half_away_from_zero(x, expected):
    assert round_half_away(x) == expected


def brute_rank(n, pct):
    # the float product, then an independent half-up rounding of its exact decimal value
    x = (n - 1) * pct / 100.0
    return min(int(Decimal(x).to_integral_value(rounding=ROUND_HALF_UP)), n - 1)


def test_rank_index_matches_brute_force():
    for n in range(1, 400):
        for pct in (0.0, 1.0, 25.0, 49.0, 50.0, 51.0, 75.0, 90.0, 95.0, 99.0, 100.0):
            assert rank_index(n, pct) == brute_rank(n, pct), (n, pct)


def test_rank_index_rounds_half_up_not_to_even():
    # n = 4: (n-1) * 0.5 = 1.5 -> 2 (banker's rounding would give 2 too); n = 6: 2.5 -> 3 (not 2)
    assert rank_index(6, 50.0) == 3
    assert rank_index(2, 50.0) == 1
    assert rank_index(10, 50.0) == 5


def test_percentile_is_order_statistic_at_rounded_rank():
    rng = random.Random(3)
    for n in (1, 2, 3, 7, 100, 1001):
        values = [rng.uniform(0, 100) for _ in range(n)]
        ordered = sorted(values)
        for pct in (50.0, 75.0, 90.0, 95.0, 99.0):
            assert percentile(values, pct) == ordered[brute_rank(n, pct)]
    assert percentile([], 50.0) == 0.0


def test_seq_sum_is_left_to_right():
    values = [1e16, 1.0, -1e16, 1.0]
    assert seq_sum(values) == ((1e16 + 1.0) - 1e16) + 1.0
    assert mean([]) == 0.0


def test_population_std_matches_exact_two_pass():
    rng = random.Random(5)
    values = [rng.lognormvariate(2, 1) for _ in range(2000)]
    exact_mean = Fraction(sum(Fraction(v) for v in values), len(values))
    exact_var = sum((Fraction(v) - exact_mean) ** 2 for v in values) / len(values)
    assert population_std(values) == pytest.approx(math.sqrt(exact_var), rel=1e-13)
    assert population_std([]) == 0.0
    assert population_std([4.0]) == 0.0
    assert population_std([1.0, 3.0]) == 1.0  # population, not sample (would be sqrt(2))


def test_exact_stats_fields_and_empty():
    values = [0.0, 1.0, 1.0, 2.5, 4.0, 4.0, 7.25, 9.5, 15.0, 22.0, 22.0, 100.0]
    stats = exact_stats(values)
    ordered = sorted(values)
    assert stats.mean == seq_sum(values) / len(values)
    assert (stats.min, stats.max) == (0.0, 100.0)
    assert stats.median == ordered[brute_rank(12, 50.0)] == 7.25
    assert stats.p75 == ordered[brute_rank(12, 75.0)]
    assert stats.p99 == 100.0
    assert stats.std == pytest.approx(population_std(values), rel=1e-15)
    assert exact_stats([]) == EMPTY_STATS


# ------------------------------------------------------------------------------------ Welford


def test_welford_matches_two_pass():
    rng = random.Random(11)
    values = [rng.uniform(1, 50) for _ in range(5000)]
    w = Welford()
    for v in values:
        w.add(v)
    assert w.count == len(values)
    assert w.mean == pytest.approx(math.fsum(values) / len(values), rel=1e-13)
    assert w.std == pytest.approx(population_std(values), rel=1e-11)
    assert (w.min, w.max) == (min(values), max(values))


def test_welford_single_step_is_the_textbook_update():
    w = Welford()
    for v in (15.0, 5.0, 5.0):
        w.add(v)
    # by hand: mean 15 -> 10 -> 10 - 5/3; m2 0 -> 50 -> 50 + 5 * 5/3
    assert w.mean == 10.0 - 5.0 / 3.0
    assert w.m2 == 50.0 + (-5.0) * (5.0 - (10.0 - 5.0 / 3.0))


def test_welford_counts_equal_repeated_adds():
    rng = random.Random(2)
    blocks = [(rng.choice([5.0, 15.0, 7.5, 0.0]), rng.randint(1, 40)) for _ in range(300)]
    one = Welford()
    many = Welford()
    for v, c in blocks:
        one.add(v, c)
        for _ in range(c):
            many.add(v)
    assert one.count == many.count
    assert one.mean == pytest.approx(many.mean, rel=1e-12)
    assert one.std == pytest.approx(many.std, rel=1e-10)
    hist = Welford.from_counts(reversed(blocks))
    assert hist.count == many.count
    assert hist.mean == pytest.approx(many.mean, rel=1e-13)
    assert hist.std == pytest.approx(many.std, rel=1e-10)
    assert (hist.min, hist.max) == (many.min, many.max)


def test_welford_ignores_non_finite_and_empty_is_zero():
    w = Welford()
    w.add(math.nan)
    w.add(math.inf)
    w.add(3.0, 0)
    assert w.count == 0 and w.std == 0.0
    assert Welford.from_counts([]).count == 0


# ------------------------------------------------------------------------------------ DDSketch


@pytest.mark.parametrize("value, representative", [
    # read back from ai-dynamo-runtime 1.6.1 reports (ITL / per-user rate percentiles)
    (5.0, 4.997811098765266),
    (15.0, 15.01425980224389),
    (200.0, 200.13682673977726),
    (80.0, 80.07798409094679),
    (12.5, 12.490899531333268),
])
def test_sketch_mapping_matches_reference_values(value, representative):
    sketch = DDSketch(ALPHA)
    assert sketch.value(sketch.key(value)) == representative


def test_sketch_mapping_formula():
    sketch = DDSketch(ALPHA)
    gamma = 1 + 2 * ALPHA / (1 - ALPHA)
    assert sketch.gamma == gamma
    for v in (1e-6, 0.3, 1.0, 5.0, 123.456, 9.9e5):
        k = sketch.key(v)
        assert gamma ** (k - 1) * (1 - 1e-12) < v <= gamma ** k * (1 + 1e-12)
        # v lies in (gamma^(k-1), gamma^k] and reads back within alpha (exactly alpha at a
        # bucket's upper edge, so allow rounding)
        assert abs(sketch.value(k) - v) <= ALPHA * v * (1 + 1e-9)


def reference_quantile(values, q, alpha=ALPHA):
    """Straightforward form of the crate's rule: representative of the sorted sample at
    floor(q * (n - 1)); zeros read as 0.0; negatives mirrored; one sample reads exactly."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0
    if len(finite) == 1:
        return finite[0]
    sketch = DDSketch(alpha)  # only for its key/value mapping
    rank = int(q * (len(finite) - 1.0))
    v = sorted(finite)[rank]
    if abs(v) < sketch.min_indexable:
        return 0.0
    rep = sketch.value(sketch.key(abs(v)))
    return rep if v > 0 else -rep


def test_sketch_quantiles_equal_straightforward_rule_and_are_accurate():
    rng = random.Random(42)
    for n in (2, 3, 10, 257, 5000):
        values = [rng.lognormvariate(1.5, 1.2) for _ in range(n)]
        sketch = DDSketch(ALPHA)
        for v in values:
            sketch.add(v)
        ordered = sorted(values)
        for q in (0.0, 0.01, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0):
            got = sketch.quantile(q)
            assert got == reference_quantile(values, q)
            exact = ordered[int(q * (n - 1))]
            assert abs(got - exact) <= ALPHA * exact * (1 + 1e-9)


def test_sketch_zero_and_negative_values():
    values = [0.0] * 5 + [3.0] * 5 + [-2.0] * 2
    sketch = DDSketch(ALPHA)
    for v in values:
        sketch.add(v)
    assert sketch.zero_count == 5 and sketch.count == 12
    for q in (0.0, 0.1, 0.2, 0.3, 0.5, 0.6, 0.9, 1.0):
        assert sketch.quantile(q) == reference_quantile(values, q)
    assert sketch.quantile(0.0) < 0 and sketch.quantile(0.5) == 0.0 and sketch.quantile(1.0) > 0
    only_zero = DDSketch(ALPHA)
    only_zero.add(0.0, 128)
    assert [only_zero.quantile(q) for q in (0.0, 0.5, 1.0)] == [0.0, 0.0, 0.0]
    tiny = DDSketch(ALPHA)
    tiny.add(1e-310, 2)  # below the smallest indexable magnitude: the zero bucket
    assert tiny.zero_count == 2


def test_sketch_single_sample_is_exact_and_empty_is_zero():
    sketch = DDSketch(ALPHA)
    assert sketch.quantile(0.5) == 0.0
    sketch.add(5.0)
    assert sketch.quantile(0.5) == 5.0  # not the bin representative 4.9978...
    sketch.add(5.0)
    assert sketch.quantile(0.5) == 4.997811098765266
    with pytest.raises(ValueError):
        sketch.quantile(1.5)


def test_sketch_counts_equal_repeated_adds():
    a, b = DDSketch(ALPHA), DDSketch(ALPHA)
    for v, c in ((5.0, 300), (15.0, 7), (0.0, 3), (80.0, 1)):
        a.add(v, c)
        for _ in range(c):
            b.add(v)
    for q in (0.0, 0.01, 0.5, 0.98, 0.99, 1.0):
        assert a.quantile(q) == b.quantile(q)


def test_sketch_ignores_non_finite():
    sketch = DDSketch(ALPHA)
    sketch.add(math.nan)
    sketch.add(math.inf)
    sketch.add(-math.inf)
    assert sketch.count == 0


def test_sketch_covers_wide_range_without_collapsing():
    sketch = DDSketch(ALPHA)
    sketch.add(1e-9)
    sketch.add(1e18)
    assert not sketch.positive.collapsed
    assert abs(sketch.quantile(0.0) - 1e-9) <= ALPHA * 1e-9
    assert abs(sketch.quantile(1.0) - 1e18) <= ALPHA * 1e18


@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_store_folds_lowest_keys_when_span_exceeds_limit(order):
    keys = list(range(300))
    store = _Store(128)
    for key in (keys if order == "ascending" else reversed(keys)):
        store.add(key)
    assert store.count == 300 and store.collapsed
    assert len(store.bins) == 128
    lowest = 299 - 128 + 1  # keys 0..172 end up in key 172
    assert store.min_key == lowest and store.max_key == 299
    assert store.key_at_rank(0) == lowest
    assert store.key_at_rank(lowest) == lowest
    assert store.key_at_rank(lowest + 1) == lowest + 1
    assert store.key_at_rank(299) == 299


def test_store_grows_in_chunks_and_recentres():
    store = _Store(32768)
    store.add(1000)
    assert len(store.bins) == 128
    store.add(1300)
    assert len(store.bins) == 384  # 301 keys -> 3 chunks
    store.add(900)
    assert [store.key_at_rank(r) for r in range(3)] == [900, 1000, 1300]
    assert not store.collapsed


# --------------------------------------------------------------------- streaming distribution


def test_streaming_percentile_selects_the_rounded_rank_within_alpha():
    for n in (2, 3, 4, 5, 10, 11, 100, 101, 256, 257):
        values = [1000.0 + i * 10.0 for i in range(n)]
        dist = StreamingDistribution()
        for v in values:
            dist.add(v)
        for pct in (0.0, 1.0, 10.0, 25.0, 49.0, 50.0, 51.0, 75.0, 90.0, 95.0, 99.0, 100.0):
            expected = values[rank_index(n, pct)]
            assert abs(dist.percentile(pct) - expected) <= expected * ALPHA, (n, pct)


def test_streaming_percentile_quantile_argument():
    # span = 10, p90 -> rank 9 -> quantile 0.95 -> floored sketch rank 9 of 10
    values = [float(i + 1) for i in range(11)]
    dist = StreamingDistribution()
    for v in values:
        dist.add(v)
    assert dist.percentile(90.0) == dist.sketch.quantile(0.95) == reference_quantile(values, 0.95)
    assert dist.percentile(99.0) == dist.sketch.quantile(1.0)


def test_streaming_stats_exact_moments_and_empty():
    dist = StreamingDistribution()
    assert dist.stats() == EMPTY_STATS
    for v in (5.0, 5.0, 15.0, 0.0):
        dist.add(v)
    stats = dist.stats()
    assert (stats.mean, stats.min, stats.max) == (6.25, 0.0, 15.0)
    assert stats.std == pytest.approx(population_std([5.0, 5.0, 15.0, 0.0]), rel=1e-15)


def test_streaming_from_counts_matches_sample_by_sample():
    rng = random.Random(9)
    pairs = [(rng.uniform(1, 30), rng.randint(1, 5)) for _ in range(200)]
    one = StreamingDistribution()
    for v, c in pairs:
        for _ in range(c):
            one.add(v)
    hist = StreamingDistribution.from_counts(pairs)
    a, b = one.stats(), hist.stats()
    assert a.median == b.median and a.p99 == b.p99 and a.min == b.min and a.max == b.max
    assert b.mean == pytest.approx(a.mean, rel=1e-13)
    assert b.std == pytest.approx(a.std, rel=1e-10)


def test_a_quantile_after_more_samples_sees_them():
    # the store keeps its running counts between quantiles; an add must drop them
    sketch = DDSketch()
    for value in (1.0, 2.0, 3.0):
        sketch.add(value)
    assert sketch.quantile(1.0) == pytest.approx(3.0, rel=2 * ALPHA)
    sketch.add(50.0, 10)
    assert sketch.quantile(1.0) == pytest.approx(50.0, rel=2 * ALPHA)
    assert sketch.quantile(0.0) == pytest.approx(1.0, rel=2 * ALPHA)


def test_from_counts_keeps_negatives_and_zeros_in_their_stores():
    dist = StreamingDistribution.from_counts([(-4.0, 2), (0.0, 3), (5.0, 1), (-4.0, 1)])
    sketch = dist.sketch
    assert (sketch.negative.count, sketch.zero_count, sketch.positive.count) == (3, 3, 1)
    assert (dist.moments.count, dist.moments.min, dist.moments.max) == (7, -4.0, 5.0)
    assert dist.moments.mean == math.fsum([-8.0, 0.0, 5.0, -4.0]) / 7


# ------------------------------------------------------------------ one-function twins


def bits(stats):
    return [x.hex() for x in stats]


def old_exact_stats(values):
    """exact_stats as it was built from the named steps."""
    if not values:
        return EMPTY_STATS
    ordered = SortedRuns(values)
    n = len(ordered)
    low, high, *picks = ordered.select([0, n - 1] + [rank_index(n, pct)
                                                     for pct in (50.0, 75.0, 90.0, 95.0, 99.0)])
    return (mean(values), low, high, *picks, population_std(ordered))


@pytest.mark.parametrize("seed", range(30))
def test_exact_stats_gives_the_bits_of_its_named_steps(seed):
    rng = random.Random(seed)
    n = rng.choice([1, 2, 3, 7, 30, 101, 1000])
    values = [rng.choice([0.0, rng.uniform(0, 1e4), rng.expovariate(0.01), 1e300 * rng.random(),
                          float(rng.randint(0, 50))]) for _ in range(n)]
    assert bits(exact_stats(values)) == bits(old_exact_stats(values))
    assert bits(exact_stats(array("d", values))) == bits(old_exact_stats(values))


def random_pairs(rng):
    """(value, count) pairs as the report's gaps give them: mostly positive ms gaps, some zeros,
    now and then a key span wider than the sketch's bins, or negatives."""
    kind = rng.choice(["ms", "ms", "wide", "zeros", "one", "negative"])
    n = 1 if kind == "one" else rng.randint(1, 300)
    pairs = []
    for _ in range(n):
        if kind == "wide":
            value = 10.0 ** rng.uniform(-300, 300)
        elif kind == "zeros" and rng.random() < 0.5:
            value = 0.0
        elif kind == "negative" and rng.random() < 0.2:
            value = -rng.uniform(0.1, 50.0)
        else:
            value = rng.uniform(0.5, 200.0)
        pairs.append((value, rng.choice([1, 1, 2, 5, 1000, 2**40])))
    return pairs


@pytest.mark.parametrize("seed", range(60))
def test_summary_stats_are_the_filled_sketch_figures(seed):
    rng = random.Random(seed)
    pairs = random_pairs(rng)
    sketch = DDSketch()
    summary = summarize_counts(pairs, sketch.multiplier, sketch.min_indexable)
    dist = StreamingDistribution()
    dist.fill(summary)
    assert bits(summary_stats(summary)) == bits(dist.stats())


def test_summary_stats_fold_a_span_wider_than_the_bins():
    sketch = DDSketch()
    low, high = 1e-200, 1e200   # keys far more than MAX_BINS apart
    keys_apart = math.ceil(math.log(high) * sketch.multiplier) - math.ceil(
        math.log(low) * sketch.multiplier)
    assert keys_apart > MAX_BINS
    pairs = [(low, 90), (1.0, 5), (high, 5)]
    summary = summarize_counts(pairs, sketch.multiplier, sketch.min_indexable)
    dist = StreamingDistribution()
    dist.fill(summary)
    assert dist.sketch.positive.collapsed
    assert bits(summary_stats(summary)) == bits(dist.stats())
    assert summary_stats(summarize_counts([], sketch.multiplier, sketch.min_indexable)) \
        == EMPTY_STATS

"""A Poisson schedule drawn in chunks (csrc/arrivals.c and its twin PyStdRng.arrivals_after)
is the schedule drawn at once, on both backends, and both backends draw the same chunks."""

from __future__ import annotations

import random

import pytest

from aisimulate_core import native
from aisimulate_core.native import NativeError
from aisimulate_core.workload.rng import StdRng

BACKENDS = ["python"] + (["c"] if native.lib is not None else [])


def chunked(rng, n, mean_gap_ms, sizes):
    """poisson_arrivals(n, ...) rebuilt from arrivals_after chunks of the given sizes."""
    out = [0.0] if n else []
    left = n - 1
    for size in sizes:
        if left <= 0:
            break
        chunk = rng.arrivals_after(out[-1], min(size, left), mean_gap_ms)
        out += chunk
        left -= len(chunk)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_chunks_continue_the_one_shot_schedule(backend, seed):
    rnd = random.Random(seed)
    n = rnd.randrange(1, 400)
    mean = rnd.choice([0.0, 1e-3, 4.0, 250.0, 1e9])
    arrival_seed = rnd.randrange(2**64)
    sizes = [rnd.randrange(1, 70) for _ in range(n)]
    want = StdRng(arrival_seed, backend=backend).poisson_arrivals(n, mean)
    assert chunked(StdRng(arrival_seed, backend=backend), n, mean, sizes) == want


@pytest.mark.skipif(native.lib is None, reason="the C core is not built")
@pytest.mark.parametrize("seed", range(6))
def test_c_and_python_draw_the_same_chunks(seed):
    rnd = random.Random(100 + seed)
    arrival_seed = rnd.randrange(2**64)
    c, py = StdRng(arrival_seed, backend="c"), StdRng(arrival_seed, backend="python")
    now = rnd.choice([0.0, 12.5, 1e6])
    for _ in range(20):
        n, mean = rnd.randrange(0, 150), rnd.choice([0.0, 0.5, 8.0, 3e4])
        got = c.arrivals_after(now, n, mean)
        assert got == py.arrivals_after(now, n, mean)
        if got:
            now = got[-1]
    assert c.next_u64() == py.next_u64()  # both consumed the same keystream


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bad_chunk_draws_nothing(backend):
    rng, fresh = StdRng(5, backend=backend), StdRng(5, backend=backend)
    with pytest.raises(NativeError, match="arrivals_after: needs a finite mean >= 0, got -1.0"):
        rng.arrivals_after(0.0, 3, -1.0)
    with pytest.raises(NativeError, match="arrivals_after: n must be >= 0, got -2"):
        rng.arrivals_after(0.0, -2, 1.0)
    assert rng.arrivals_after(1.0, 0, 1.0) == []
    assert rng.next_u64() == fresh.next_u64()

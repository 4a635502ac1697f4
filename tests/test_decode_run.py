"""The C decode-run loop (csrc/decode_run.c) against its Python twin (engine/decode_run.py).

Seeded random runs: the same run state through both must give the same pass end times, bit for
bit, for the built-in timing models evaluated in C, for an external model served through the C
memo, and with speedup ratios that exercise the nanosecond rounding near its half-way cases.
"""

from __future__ import annotations

import math
import random

import pytest

from aisimulate_core import native
from aisimulate_core.engine.decode_run import CDecodeRun, run_python
from aisimulate_core.engine.timing import FixedTiming, PolynomialTiming, StepTimer
from aisimulate_core.errors import SimulationError

pytestmark = pytest.mark.skipif(native.lib is None, reason="the C core is not built")


class TableTiming:
    """An external provider's shape: any decode time, here a deterministic hash of the key."""

    def __init__(self, seed):
        self.seed = seed
        self.calls = 0

    def prefill_ms(self, batch_size, mean_isl, mean_prefix):
        return 1.0

    def decode_ms(self, batch_size, active_kv_tokens, mean_context_length, total_kv_tokens):
        self.calls += 1
        h = hash((self.seed, batch_size, active_kv_tokens)) % 10_000
        return 0.5 + h / 997.0


def random_timer(rng):
    ratio = rng.choice([1.0, 1.0, 0.0, 1.3, 2.0, 0.7, 3.141592653589793])
    decode_ratio = rng.choice([1.0, 1.0, 0.5, 1.7])
    model = rng.choice([
        FixedTiming(0.0, rng.choice([0.0, 1.0, 7.5, 0.1 + rng.random(), 12.000000000499999])),
        PolynomialTiming(),
        TableTiming(rng.randrange(1 << 30)),
    ])
    return StepTimer(model, speedup_ratio=ratio, decode_speedup_ratio=decode_ratio)


def random_run(rng):
    block_size = rng.choice([1, 2, 16, 64, 1000, 10**8])
    batch = rng.randint(1, 300)
    first_pass = rng.randint(1, 10**6)
    crossing = {}
    for _ in range(rng.randint(0, min(batch, 40))):
        crossing[rng.randrange(min(block_size, 5000))] = rng.randint(0, 30)
    return dict(
        first_pass=first_pass,
        end_ms=rng.uniform(0, 1e6),
        batch=batch,
        base=rng.randint(-batch * first_pass // 2, 10**7),
        total_kv=rng.choice([0, 1000, 10**6, rng.randint(1, 10**9)]),
        block_size=block_size,
        room=rng.randint(0, 500),
        horizon_ms=rng.choice([math.inf, rng.uniform(0, 2e6)]),
        cutoff_ms=rng.choice([math.inf, rng.uniform(0, 2e6)]),
        crossing=crossing,
        stop_pass=rng.choice([-1, first_pass + rng.randint(0, 5000)]),
        max_passes=rng.choice([4096, rng.randint(1, 4096)]),
    )


@pytest.mark.parametrize("seed", range(40))
def test_c_run_matches_python_twin(seed):
    rng = random.Random(seed)
    for _ in range(25):
        timer = random_timer(rng)
        run = random_run(rng)
        total_kv = run["total_kv"]
        twin = run_python(timer.decode, **run)
        c = CDecodeRun(timer, total_kv)(**run)
        assert c.tobytes() == twin.tobytes(), run


def test_external_times_are_asked_once_per_pass_shape():
    """The C memo keeps what Python answered: a second identical run asks nothing."""
    model = TableTiming(7)
    timer = StepTimer(model)
    loop = CDecodeRun(timer, 10**6)
    run = dict(first_pass=10, end_ms=0.0, batch=4, base=1000, total_kv=10**6, block_size=16,
               room=10**6, horizon_ms=math.inf, cutoff_ms=math.inf, crossing={3: 4},
               stop_pass=-1, max_passes=300)
    first = loop(**run)
    assert len(first) == 300
    timer.decode_memo.clear()
    asked = model.calls
    assert loop(**run).tobytes() == first.tobytes()
    assert model.calls == asked


def test_builtin_times_equal_the_timer_bit_for_bit():
    """aisim_decode_timing_eval is StepTimer.decode for the built-in models, including
    half-nanosecond ties after a speedup and times past 2^53 ns (answered by Python)."""
    ffi, lib = native.ffi, native.lib
    rng = random.Random(3)
    out = ffi.new("double *")
    for _ in range(3000):
        timer = random_timer(rng)
        if isinstance(timer.model, TableTiming):
            continue
        total = rng.choice([0, 1, 10**6, rng.randint(1, 10**12)])
        loop = CDecodeRun(timer, total)
        batch = rng.randint(1, 1000)
        active = rng.randint(0, 2 * max(total, 1))
        status = lib.aisim_decode_timing_eval(loop._timing, batch, active, out)
        expected = timer.decode(batch, active, active // batch, total)
        if status == native.OK:
            assert out[0] == expected
        else:
            assert status == lib.AISIM_DECODE_MISS


def test_out_of_range_time_raises_the_timer_error():
    """A pass time no Duration holds is reported by Python's timer, with its message."""
    timer = StepTimer(FixedTiming(0.0, 1e30))
    run = dict(first_pass=1, end_ms=0.0, batch=1, base=0, total_kv=100, block_size=16,
               room=10, horizon_ms=math.inf, cutoff_ms=math.inf, crossing={}, stop_pass=-1,
               max_passes=10)
    with pytest.raises(SimulationError, match="out of range"):
        run_python(timer.decode, **run)
    with pytest.raises(SimulationError, match="out of range"):
        CDecodeRun(timer, 100)(**run)


def test_a_pool_past_int64_runs_in_python():
    """A KV pool of 2^64 - 1 blocks (accepted, as by the reference) has more tokens than C's
    integers hold: the rank's run loop is the Python one, with the same answers."""
    from aisimulate_core.engine.decode_run import decode_runner

    timer = StepTimer(PolynomialTiming())
    total_kv = ((1 << 64) - 1) * 16
    run = decode_runner(timer, total_kv, backend="c")
    assert not isinstance(run, CDecodeRun)
    ends = run(first_pass=1, end_ms=0.0, batch=2, base=10, total_kv=total_kv, block_size=16,
               room=5, horizon_ms=math.inf, cutoff_ms=math.inf, crossing={}, stop_pass=-1,
               max_passes=5)
    expected, end = [0.0], 0.0
    for P in range(1, 5):
        active = 10 + 2 * P
        end += timer.decode(2, active, active // 2, total_kv)
        expected.append(end)
    assert list(ends) == expected

"""The C offload tier pool (csrc/offload_tier.c) against its Python twin (kv/offload_tier.py).

Seeded random operations over a small key space (so that keys collide, repeat and come back
after eviction): reserve with and without a protected cohort, complete with a shared epoch or
one by one, pin, unpin, touch, discard, and misuse (present keys reserved, absent or
wrong-state keys completed or pinned). After every operation both give the same answer or the
same error, and hold the same entries, states, pins and LRU order.
"""

from __future__ import annotations

import random

import pytest

from aisimulate_core import native
from aisimulate_core.errors import NativeArgumentError
from aisimulate_core.kv.offload_tier import (ABSENT, PENDING, RESIDENT, COffloadTier,
                                             PyOffloadTier, offload_tier)

pytestmark = pytest.mark.skipif(native.lib is None, reason="the C core is not built")

MASK = (1 << 64) - 1


def outcome(call):
    try:
        return ("ok", call())
    except NativeArgumentError as exc:
        return ("invalid", type(exc).__name__)


def snapshot(tier, keys):
    return (len(tier), tier.pending, tier.pinned, tier.evictions, tier.lru(),
            [tier.state(h) for h in keys])


def pick(rng, keys, n):
    return [rng.choice(keys) for _ in range(n)]


def test_offload_tier_twins_agree_on_random_operations():
    for seed in range(60):
        rng = random.Random(seed)
        capacity = rng.randint(1, 12)
        keys = [rng.getrandbits(64) for _ in range(rng.randint(4, 24))] + [0, MASK]
        c, py = COffloadTier(capacity), PyOffloadTier(capacity)
        for _ in range(300):
            roll = rng.random()
            present = [h for h in keys if py.state(h)[0] != ABSENT]
            pending = [h for h in keys if py.state(h)[0] == PENDING]
            resident = [h for h in keys if py.state(h)[0] == RESIDENT]
            pinned = [h for h in resident if py.state(h)[1] > 0]
            if roll < 0.3:
                absent = [h for h in keys if h not in present]
                batch = rng.sample(absent, min(len(absent), rng.randint(0, 5)))
                if rng.random() < 0.1:
                    batch += pick(rng, keys, 1)        # maybe present or repeated: misuse
                protect = pick(rng, keys, rng.randint(0, 4))
                op = ("reserve", batch, protect)
            elif roll < 0.5:
                batch = rng.sample(pending, min(len(pending), rng.randint(0, 4)))
                if rng.random() < 0.1:
                    batch += pick(rng, keys, 1)
                op = ("complete", batch, rng.random() < 0.7)
            elif roll < 0.62:
                batch = rng.sample(resident, min(len(resident), rng.randint(0, 3)))
                if rng.random() < 0.1:
                    batch += pick(rng, keys, 1)
                op = ("pin", batch)
            elif roll < 0.74:
                batch = rng.sample(pinned, min(len(pinned), rng.randint(0, 3)))
                if rng.random() < 0.1:
                    batch += pick(rng, keys, 1)
                op = ("unpin", batch, rng.random() < 0.7)
            elif roll < 0.8:
                batch = rng.sample(pending, min(len(pending), rng.randint(0, 2)))
                if rng.random() < 0.2:
                    batch += pick(rng, keys, 1)
                op = ("discard", batch)
            elif roll < 0.95:
                op = ("touch", pick(rng, keys, rng.randint(0, 6)), rng.random() < 0.5)
            elif roll < 0.975:
                op = ("leading", pick(rng, keys, rng.randint(0, 6)))
            else:
                op = ("absent", pick(rng, keys, rng.randint(0, 8)))
            name, *args = op
            got_c = outcome(lambda: getattr(c, name)(*args))
            got_py = outcome(lambda: getattr(py, name)(*args))
            assert got_c == got_py, (seed, op)
            assert snapshot(c, keys) == snapshot(py, keys), (seed, op)
            c.check()
            py.check()


def test_reserve_evicts_oldest_unprotected_and_refuses_without_change():
    for backend in ("c", "python"):
        tier = offload_tier(3, backend=backend)
        assert tier.reserve([30, 10, 20]) == []
        tier.complete([30, 10, 20])                      # one epoch: ascending hash order
        assert tier.lru() == [10, 20, 30]
        tier.touch([10, 20], reverse=True)              # 20 then 10 become the most recent
        assert tier.lru() == [30, 20, 10]
        tier.pin([30])
        assert tier.reserve([40], protect=[20]) == [10]  # 30 pinned, 20 protected
        assert tier.state(40) == (PENDING, 0)
        before = snapshot(tier, [10, 20, 30, 40, 50, 60])
        assert tier.reserve([50, 60]) is None           # only 20 may go: nothing changes
        assert snapshot(tier, [10, 20, 30, 40, 50, 60]) == before
        tier.unpin([30])
        assert tier.lru() == [20, 30]
        assert tier.evictions == 1
        with pytest.raises(NativeArgumentError):
            tier.complete([20])                          # resident, not pending
        with pytest.raises(NativeArgumentError):
            tier.reserve([40])                           # present


def test_absent_names_the_absent_hashes_by_index():
    for backend in ("c", "python"):
        tier = offload_tier(4, backend=backend)
        assert tier.absent([]) == []
        tier.reserve([5, 7])
        tier.complete([7])
        assert tier.absent([1, 5, 2, 7, 3]) == [0, 2, 4]   # pending and resident are present
        assert tier.absent([5, 7]) == []

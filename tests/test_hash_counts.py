"""The C hash multiset (csrc/hash_counts.c) against its Python twin (kv/hash_counts.py).

Seeded random operations on chains drawn from a small tree of shared prefixes (what a router
holds), mixed with operations that break the chain rules (absent hashes, repeats, arbitrary
lists): after every operation both give the same answer or the same error, and hold the same
counts.
"""

from __future__ import annotations

import random

import pytest

from aisimulate_core import native
from aisimulate_core.errors import NativeArgumentError
from aisimulate_core.kv.hash_counts import CHashCounts, PyHashCounts

pytestmark = pytest.mark.skipif(native.lib is None, reason="the C core is not built")

MASK = (1 << 64) - 1


def chain(ids):
    return [hash(tuple(ids[:i + 1])) & MASK for i in range(len(ids))]


def random_hashes(rng, live):
    roll = rng.random()
    if roll < 0.6:
        return chain([rng.randrange(3) for _ in range(rng.randrange(0, 12))])
    if roll < 0.8 and live:
        return list(rng.choice(live))
    if roll < 0.9:   # not a chain: anything, repeats included
        return [rng.choice([0, 1, 2, MASK, rng.getrandbits(64)]) for _ in range(rng.randrange(0, 8))]
    return [rng.getrandbits(64) for _ in range(rng.randrange(0, 4))]


def outcome(call):
    try:
        return ("ok", call())
    except NativeArgumentError as exc:
        return ("error", str(exc))


@pytest.mark.parametrize("seed", range(30))
def test_c_map_matches_python_twin(seed):
    rng = random.Random(seed)
    c, py = CHashCounts(), PyHashCounts()
    live = []
    for _ in range(400):
        hashes = random_hashes(rng, live)
        op = rng.choice(["held_prefix", "add_chain", "add_chain", "drop_chain", "insert_all",
                         "remove_all", "leading", "leading_absent"])
        if op == "drop_chain" and live and rng.random() < 0.8:
            hashes = live.pop(rng.randrange(len(live)))
        args = (hashes,)
        if op.startswith("leading") and rng.random() < 0.5:
            args = (hashes, rng.randrange(len(hashes) + 2), rng.choice([None, rng.randrange(0, len(hashes) + 2)]))
        got = outcome(lambda: getattr(c, op)(*args))
        want = outcome(lambda: getattr(py, op)(*args))
        assert got == want, (op, hashes)
        if op == "add_chain" and want[0] == "ok":
            live.append(hashes)
        assert len(c) == len(py)
        assert dict(c.items()) == dict(py.items())
        probe = rng.choice(hashes) if hashes else 0
        assert (probe in c) == (probe in py)


def test_a_union_of_chains_is_refcounted():
    """Two prompts sharing a prefix: the shared blocks count 2 until one request ends."""
    c = CHashCounts()
    first, second = chain([1, 2, 3]), chain([1, 2, 4, 5])
    c.add_chain(first)
    c.add_chain(second)
    assert dict(c.items()) == {first[0]: 2, first[1]: 2, first[2]: 1, second[2]: 1, second[3]: 1}
    assert c.held_prefix(chain([1, 2, 9])) == 2
    c.drop_chain(first)
    assert dict(c.items()) == {h: 1 for h in second}
    with pytest.raises(NativeArgumentError, match="not a chain"):
        c.drop_chain(first)
    assert dict(c.items()) == {h: 1 for h in second}


def test_large_maps_keep_every_hash():
    """Growth and backward-shift deletion over many keys (probe runs that wrap)."""
    rng = random.Random(5)
    c, py = CHashCounts(), PyHashCounts()
    keys = [rng.getrandbits(64) for _ in range(20000)]
    c.insert_all(keys)
    py.insert_all(keys)
    gone = keys[::3]
    c.remove_all(gone)
    py.remove_all(gone)
    assert len(c) == len(py)
    assert dict(c.items()) == dict(py.items())
    assert c.leading(keys[1:3]) == 2 and c.leading(keys[:2]) == 0


@pytest.mark.parametrize("seed", range(6))
def test_interning_in_c_matches_python_twin(seed):
    """A trace's raw ids to dense ids (mooncake._lone_turns): the same numbers in C and in
    Python over seeded batches of repeats, extremes and fresh ids, the map growing past its
    first tables, and the map's counts are the dense ids."""
    from array import array
    rng = random.Random(seed)
    c, py = CHashCounts(), PyHashCounts()
    seen = []
    for _ in range(40):
        raw = array("Q", [rng.choice([0, MASK, rng.getrandbits(64), rng.randrange(50)]
                                     if not seen or rng.random() < 0.5 else [rng.choice(seen)])
                          for _ in range(rng.randrange(0, 200))])
        seen.extend(raw)
        got, want = c.intern(raw), py.intern(raw)
        assert got.typecode == want.typecode == "I" and got == want
        assert len(c) == len(py) == len(set(seen))
    assert sorted(c.items()) == sorted(py.items())
    assert sorted(count for _, count in c.items()) == list(range(len(c)))

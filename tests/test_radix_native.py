"""The C radix cache (kv/radix_native.py over csrc/radix_cache.c) against its Python twin
(kv/radix_cache.py): seeded random sequences of inserts, matches, locks, unlocks, touches,
evictions and eviction-log takes at page sizes 1..16 give the same answers, the same tree
(edges, spans, access stamps, locks) and the same free, evictable and protected counts."""

from __future__ import annotations

import random
from array import array

import pytest

from aisimulate_core import native
from aisimulate_core.errors import NativeError
from aisimulate_core.kv.radix_cache import RadixCache

pytestmark = pytest.mark.skipif(native.lib is None, reason="the C core is not built")

if native.lib is not None:
    from aisimulate_core.kv.radix_native import NativeRadixCache, make_radix_cache


def _sequences(rng, ps, count):
    """Token arrays that share prefixes of various lengths (a small alphabet, so that edges
    also agree on part of a page and split at page boundaries only)."""
    seqs = []
    for _ in range(count):
        if seqs and rng.random() < 0.7:
            base = rng.choice(seqs)
            cut = rng.randrange(len(base) + 1)
            tokens = array("I", base[:cut])
        else:
            tokens = array("I")
        tokens.extend(rng.randrange(3) for _ in range(rng.randrange(1, 6 * ps)))
        seqs.append(tokens)
    return seqs


def _fields(cache, node):
    """What identifies a node across the twins: its span, stamp, lock and children."""
    if isinstance(cache, RadixCache):
        return node.start, node.end, node.access, node.lock, len(node.children)
    return cache.node_fields(node)[:5]


def _same_counts(py, c):
    assert (py.free_tokens, py.evictable_size, py.protected_size, py.inserts) == \
        (c.free_tokens, c.evictable_size, c.protected_size, c.inserts)


def _run(seed, ops=260):
    rng = random.Random(seed)
    ps = rng.randint(1, 16)
    trim = rng.random() < 0.8
    total = ps * rng.randint(8, 60)
    py = RadixCache(total, ps, trim_partial_leaf=trim)
    c = NativeRadixCache(total, ps, trim_partial_leaf=trim)
    seqs = _sequences(rng, ps, 24)
    held = []        # (python node, C node, tokens, depth): locked paths
    memos = []       # (python match, C match, inserts of each)
    clock = 0
    for step in range(ops):
        clock += rng.randint(0, 3)      # equal stamps happen (ties break by indexing order)
        op = rng.random()
        tokens = rng.choice(seqs)
        n = len(tokens)
        if op < 0.15:
            limit = rng.randint(0, n)
            a, b = py.match_where(tokens, limit), c.match_where(tokens, limit)
            assert a[0] == b[0] and _fields(py, a[1]) == _fields(c, b[1])
            memos.append((a, b, py.inserts, c.inserts))
        elif op < 0.35:
            limit = rng.randint(0, n)
            a = py.match_and_lock(tokens, limit, clock)
            b = c.match_and_lock(tokens, limit, clock)
            assert a[0] == b[0] and _fields(py, a[1]) == _fields(c, b[1])
            if a[1] is not py.root:
                held.append((a[1], b[1], tokens, a[0]))
        elif op < 0.45 and held:
            pn, cn, _, _ = held.pop(rng.randrange(len(held)))
            py.unlock(pn)
            c.unlock(cn)
        elif op < 0.70:
            # SglangKv._insert_own: a holder puts more of its tokens below its node, the new
            # node is locked and the old one unlocked; or a plain insert from the root
            if held and rng.random() < 0.7:
                k = rng.randrange(len(held))
                pn, cn, tokens, depth = held[k]
            else:
                k, pn, cn, depth = None, py.root, c.root, 0
            n = len(tokens)
            end = depth + ps * rng.randint(0, max(0, (n - depth) // ps))
            create = clock + rng.randint(0, 1)
            allow = rng.random() < 0.8
            a = py.insert(pn, tokens, depth, end, clock, create, allow)
            b = c.insert(cn, tokens, depth, end, clock, create, allow)
            assert a[1] == b[1] and _fields(py, a[0]) == _fields(c, b[0])
            if k is not None:
                if a[0] is not pn:
                    py.lock(a[0])
                    c.lock(b[0])
                    py.unlock(pn)
                    c.unlock(cn)
                # the holder's tokens on the tree now end where its node does
                held[k] = (a[0], b[0], tokens, a[0].end)
        elif op < 0.76 and held:
            pn, cn, _, _ = rng.choice(held)
            py.touch_path(pn, clock)
            c.touch_path(cn, clock)
        elif op < 0.88:
            want = rng.randint(0, total // 2)
            assert py.evict(want) == c.evict(want)
        elif op < 0.92:
            k = rng.randint(0, total // 4)
            if rng.random() < 0.5:
                assert py.allocate(k) == c.allocate(k)
            else:
                py.free(k)
                c.free(k)
        elif op < 0.96:
            on = rng.random() < 0.8
            py.log_evictions(on)
            c.log_evictions(on)
        else:
            absent = rng.random() < 0.5
            assert list(py.take_evicted(absent)) == list(c.take_evicted(absent))
        if memos and rng.random() < 0.3:
            a, b, ia, ib = rng.choice(memos)
            assert py.still_matches(a[0], a[1], ia) == c.still_matches(b[0], b[1], ib)
        _same_counts(py, c)
        if step % 16 == 0:
            assert py.tree() == c.tree()
            c.check()
    assert py.tree() == c.tree()
    assert list(py.take_evicted()) == list(c.take_evicted())
    c.check()


@pytest.mark.parametrize("chunk", range(6))
def test_random_operation_sequences_match_the_python_twin(chunk):
    for seed in range(chunk * 40, chunk * 40 + 40):
        _run(seed)


def test_every_page_size_one_to_sixteen():
    for ps in range(1, 17):
        rng = random.Random(1000 + ps)
        for _ in range(3):
            seed = rng.randrange(1 << 30)
            # (the seed decides the page size; redraw until it is ps)
            while random.Random(seed).randint(1, 16) != ps:
                seed += 1
            _run(seed, ops=200)


def test_an_evicted_node_is_dead_to_still_matches_and_locks():
    c = NativeRadixCache(16, 1)
    tokens = array("I", [1, 2, 3, 4])
    c.allocate(4)
    node, present = c.insert(c.root, tokens, 0, 4, 1, 1)
    assert present == 0 and c.match_where(tokens, 4) == (4, node)
    inserts = c.inserts
    assert c.still_matches(4, node, inserts)
    assert c.evict(4) == 4 and c.free_tokens == 16
    assert not c.still_matches(4, node, inserts)
    # its index is reused under a new generation: the old handle stays dead
    again, _ = c.insert(c.root, tokens, 0, 4, 2, 2)
    assert again != node
    with pytest.raises(NativeError):
        c.lock(node)
    c.check()


def test_bad_arguments_are_refused_without_a_change():
    c = NativeRadixCache(32, 4)
    tokens = array("I", range(8))
    with pytest.raises(ValueError):
        c.insert(c.root, tokens, 0, 6, 1, 1)      # not whole pages
    with pytest.raises(ValueError):
        c.match_where(tokens, 9)                 # past the tokens given
    with pytest.raises(ValueError):
        c.unlock(c.insert(c.root, tokens, 0, 8, 1, 1)[0])   # an unlock without a lock
    assert c.evictable_size == 8 and c.protected_size == 0
    c.check()


def test_make_radix_cache_follows_the_backend():
    assert isinstance(make_radix_cache(8, 1, backend="python"), RadixCache)
    assert isinstance(make_radix_cache(8, 1, backend="c"), NativeRadixCache)

"""The SGLang radix cache: matching, splitting, locks and LRU leaf eviction."""

from __future__ import annotations

import random
from array import array

from aisimulate_core.kv.radix_cache import RadixCache, common_prefix


def toks(*values):
    return array("I", values)


def put(cache, tokens, access):
    """Insert a finished sequence from the root (pages are taken from the pool first)."""
    n = len(tokens) - len(tokens) % cache.page_size
    cache.allocate(n)
    node, present = cache.insert(cache.root, tokens, 0, n, access, access)
    cache.free(present)
    return node


def test_common_prefix():
    a = toks(1, 2, 3, 4, 5)
    assert common_prefix(a, toks(1, 2, 3, 4, 5), 0, 5) == 5
    assert common_prefix(a, toks(1, 2, 9, 4, 5), 0, 5) == 2
    assert common_prefix(a, toks(1, 2, 3, 4, 9), 1, 5) == 3
    assert common_prefix(a, toks(9), 0, 0) == 0


def test_match_splits_edge_and_counts_sizes():
    cache = RadixCache(100, 1)
    put(cache, toks(1, 2, 3, 4, 5), 1)
    assert cache.evictable_size == 5 and cache.available() == 95
    assert cache.match_len(toks(1, 2, 3, 9), 4) == 3
    matched, node = cache.match_and_lock(toks(1, 2, 3, 9), 4, 2)
    assert matched == 3 and node.end - node.start == 3
    assert cache.protected_size == 3 and cache.evictable_size == 2
    cache.unlock(node)
    assert cache.protected_size == 0 and cache.evictable_size == 5


def test_match_is_capped_and_page_aligned():
    cache = RadixCache(100, 4)
    put(cache, toks(*range(10)), 1)           # 8 tokens = 2 pages on the tree
    assert cache.evictable_size == 8
    assert cache.match_len(toks(*range(10)), 10) == 8
    assert cache.match_len(toks(*range(10)), 7) == 4
    assert cache.match_len(toks(0, 1, 2, 3, 4, 5, 9, 9), 8) == 4


def test_locked_paths_are_not_evicted_and_lru_leaf_goes_first():
    cache = RadixCache(10, 1)
    put(cache, toks(1, 2, 3), 1)
    put(cache, toks(4, 5, 6), 2)
    put(cache, toks(7, 8, 9), 3)
    _, node = cache.match_and_lock(toks(1, 2, 3), 3, 4)   # oldest, but locked now
    assert cache.evict(3) == 3
    assert cache.match_len(toks(4, 5, 6), 3) == 0            # the next oldest went
    assert cache.match_len(toks(1, 2, 3), 3) == 3
    cache.unlock(node)
    assert cache.evict(1) == 1                               # (1,2,3) was touched at 4
    assert cache.match_len(toks(7, 8, 9), 3) == 2            # trimmed: keeps its older prefix


def test_evicting_a_whole_leaf_exposes_its_parent():
    cache = RadixCache(20, 1)
    put(cache, toks(1, 2, 3, 4), 1)
    put(cache, toks(1, 2, 7, 8), 2)                          # splits (1,2) off as a parent
    assert cache.evict(4) == 4                               # both 2-token leaves
    assert cache.match_len(toks(1, 2, 3), 3) == 2
    assert cache.evict(2) == 2
    assert cache.match_len(toks(1, 2), 2) == 0
    assert cache.available() == 20 and cache.evictable_size == 0


def test_insert_reports_pages_already_present():
    cache = RadixCache(20, 1)
    put(cache, toks(1, 2, 3), 1)
    cache.allocate(5)
    node, present = cache.insert(cache.root, toks(1, 2, 3, 4, 5), 0, 5, 2, 2)
    assert present == 3
    cache.free(present)
    assert cache.evictable_size == 5 and cache.available() == 15


def _brute_match(stored, tokens, limit, ps):
    best = 0
    for seq in stored:
        n = 0
        while n < min(len(seq), limit) and seq[n] == tokens[n]:
            n += 1
        best = max(best, n - n % ps)
    return best


def test_random_inserts_match_like_a_list_of_sequences():
    rng = random.Random(7)
    for ps in (1, 2, 4):
        cache = RadixCache(100000, ps)
        stored = []
        for step in range(300):
            seq = toks(*[rng.randint(0, 3) for _ in range(rng.randint(1, 12))])
            probe = toks(*[rng.randint(0, 3) for _ in range(12)])
            limit = rng.randint(0, 12)
            assert cache.match_len(probe, limit) == _brute_match(stored, probe, limit, ps)
            put(cache, seq, step + 1)
            stored.append(seq[:len(seq) - len(seq) % ps])
        total = cache.evictable_size + cache.protected_size
        assert total + cache.available() == 100000 - 100000 % ps


def test_heap_compaction_keeps_eviction_order():
    rng = random.Random(11)
    caches = [RadixCache(400, 1), RadixCache(400, 1)]
    caches[1]._compact_at = 4               # compact all the time
    access = 0
    for _ in range(400):
        seq = toks(*[rng.randint(0, 5) for _ in range(rng.randint(1, 8))])
        access += 1
        results = []
        for cache in caches:
            if cache.available() < 8:
                results.append(cache.evict(8))
            node = put(cache, seq, access)
            cache.touch_path(node, access)
            results.append(cache.match_len(toks(*range(6)), 6))
            results.append((cache.evictable_size, cache.available()))
        half = len(results) // 2
        assert results[:half] == results[half:]


def test_a_memoized_match_is_invalidated_by_inserts_and_by_evicting_its_edge():
    cache = RadixCache(10, 1)
    put(cache, toks(1, 2, 3), 1)
    put(cache, toks(7, 8), 2)
    matched, node = cache.match_where(toks(1, 2, 3, 4), 4)
    inserts = cache.inserts
    assert matched == 3 and cache.still_matches(matched, node, inserts)
    cache.evict(1)                     # (1,2,3) is older: trimmed to (1,2)
    assert not cache.still_matches(matched, node, inserts)
    assert cache.match_len(toks(1, 2, 3, 4), 4) == 2
    matched, node = cache.match_where(toks(7, 8, 9), 3)
    inserts = cache.inserts
    cache.evict(2)                     # takes (1,2); (7,8) stays
    assert cache.still_matches(matched, node, inserts)
    put(cache, toks(7, 8, 9), 3)
    assert not cache.still_matches(matched, node, inserts)

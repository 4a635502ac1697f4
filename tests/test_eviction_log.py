"""The pools' eviction log (the router's "removed" KV events) on tiny hand-made cases.

Block pool, both backends: hashes come out in LRU eviction order, only for a hash's last
resident copy, nothing while the log is off, and a take empties it. Radix cache: evicted
pages are named by the prompt's block hashes, deepest first.
"""

from array import array

import pytest

from aisimulate_core import native
from aisimulate_core.kv.block_pool import BlockPool
from aisimulate_core.kv.radix_cache import RadixCache
from aisimulate_core.workload.prompt import Prompt
from test_block_pool import H, computed, make_pool  # noqa: F401 (fixture)
from test_radix_cache import put


@pytest.fixture
def make_logged(make_pool):
    """``make_pool`` with the eviction log on."""

    def make(num_blocks):
        pool = make_pool(num_blocks)
        pool.log_evictions(True)
        return pool

    return make


def hit(pool, hashes):
    """A request served from the cache: its blocks go to the LRU tail again."""
    seq = pool.new_seq()
    pool.acquire(seq, hashes, 0, len(hashes))
    pool.release(seq)


def fill(pool, k):
    """A request taking k fresh blocks (evicting as needed), never committed."""
    seq = pool.new_seq()
    assert pool.allocate(seq, k)
    return seq


def test_log_follows_lru_eviction_order(make_logged):
    pool = make_logged(4)
    computed(pool, H(1, 2))
    computed(pool, H(3, 4))      # LRU, oldest first: 2 1 4 3
    hit(pool, H(1))              # 2 4 3 1
    assert pool.take_evicted() == H()
    fill(pool, 3)
    assert pool.take_evicted() == H(2, 4, 3)
    assert pool.evictions == 3
    assert pool.match(H(1)) == 1


def test_take_empties_the_log(make_logged):
    pool = make_logged(2)
    computed(pool, H(1, 2))
    seq = fill(pool, 1)
    assert pool.take_evicted() == H(2)
    assert pool.take_evicted() == H()
    pool.release(seq)
    fill(pool, 2)                # the free block first, then 1
    assert pool.take_evicted() == H(1)
    assert pool.take_evicted() == H()


def test_log_is_off_by_default_and_off_drops_it(make_pool):
    pool = make_pool(2)
    computed(pool, H(1, 2))
    pool.release(fill(pool, 2))
    assert pool.evictions == 2
    assert pool.take_evicted() == H()
    computed(pool, H(3, 4))
    pool.log_evictions(True)
    pool.log_evictions(True)     # enabling again keeps what is logged
    pool.release(fill(pool, 1))
    pool.log_evictions(True)
    assert pool.take_evicted() == H(4)
    pool.release(fill(pool, 2))  # the free block, then 3 into the log, which off drops
    assert pool.evictions == 4
    pool.log_evictions(False)
    assert pool.take_evicted() == H()
    pool.log_evictions(True)
    assert pool.take_evicted() == H()


def test_only_the_last_copy_of_a_hash_is_logged(make_logged):
    pool = make_logged(2)
    first, second = pool.new_seq(), pool.new_seq()
    for seq in (first, second):  # computed twice before either committed: two copies of 7
        assert pool.allocate(seq, 1)
        pool.commit(seq, H(7), 0, 1)
    pool.release(first)
    pool.release(second)
    seq = fill(pool, 1)
    assert pool.take_evicted() == H()         # a copy of 7 is still resident
    assert pool.match(H(7)) == 1
    fill(pool, 1)
    assert pool.take_evicted() == H(7)
    assert pool.evictions == 2
    pool.release(seq)


def test_uncommitted_blocks_and_refusals_log_nothing(make_logged):
    pool = make_logged(2)
    pool.release(fill(pool, 2))  # private blocks are freed, never evicted
    computed(pool, H(5))
    held = fill(pool, 1)
    assert not pool.allocate(pool.new_seq(), 2)  # refused: changes nothing
    assert pool.take_evicted() == H()
    assert pool.allocate_each([held], 1)
    assert pool.take_evicted() == H(5)


def evict_then_compute_again(pool):
    computed(pool, H(1, 2, 3))   # LRU: 3 2 1
    seq = fill(pool, 2)          # evicts 3, 2
    computed(pool, H(4))         # evicts 1
    pool.release(seq)
    computed(pool, H(3))         # 3 is back, on a freed block


def test_absent_only_skips_hashes_committed_again(make_logged):
    """Within one pass a hash can be evicted and computed again: with ``absent_only`` the
    take names only the hashes no longer resident, so a router that applies the pass's
    stored hashes and then these holds what the pool holds."""
    raw, net = make_logged(3), make_logged(3)
    evict_then_compute_again(raw)
    evict_then_compute_again(net)
    assert raw.take_evicted() == H(3, 2, 1)
    assert net.take_evicted(absent_only=True) == H(2, 1)
    assert net.take_evicted(absent_only=True) == H()
    assert net.match(H(3)) == 1 and net.match(H(2)) == 0


@pytest.mark.skipif(native.lib is None, reason="C core not built")
def test_c_take_with_too_small_a_buffer_keeps_the_log():
    pool = BlockPool(1, backend="c")
    pool.log_evictions(True)
    computed(pool, H(9))
    fill(pool, 1)
    assert native.lib.aisim_kv_take_evicted(pool._pool, 0, native.ffi.NULL, 0) == native.EINVAL
    assert pool.take_evicted() == H(9)


# ------------------------------------------------------------------ radix cache


def test_radix_cache_logs_the_prompt_block_hashes_deepest_first():
    ps = 4
    prompt = Prompt.from_hash_ids([10, 11, 12], 12, ps)   # one run of 4 tokens per page
    other = Prompt.from_hash_ids([10, 20], 8, ps)
    tokens = array("I", [v for v in (10, 11, 12) for _ in range(ps)])
    other_tokens = array("I", [v for v in (10, 20) for _ in range(ps)])
    hashes, other_hashes = prompt.block_hashes(ps), other.block_hashes(ps)
    cache = RadixCache(20, ps)
    cache.log_evictions(True)
    put(cache, tokens, 1)
    put(cache, other_tokens, 2)       # splits page 10 off as the common parent
    assert cache.evict(8) == 8        # the older leaf, pages 11 and 12 of the first prompt
    assert cache.take_evicted() == array("Q", [hashes[2], hashes[1]])
    assert cache.take_evicted() == array("Q")
    assert cache.evict(8) == 8        # the other leaf, then the parent it leaves bare
    assert cache.take_evicted() == array("Q", [other_hashes[1], hashes[0]])
    assert other_hashes[0] == hashes[0]


def test_radix_cache_trimmed_leaf_logs_its_tail_pages_only():
    cache = RadixCache(12, 2)
    cache.log_evictions(True)
    tokens = array("I", range(6))
    put(cache, tokens, 1)
    assert cache.evict(3) == 4        # two pages off the end of the three
    chain = Prompt.from_tokens(tokens).block_hashes(2)
    assert cache.take_evicted() == array("Q", [chain[2], chain[1]])
    assert cache.match_len(tokens, 6) == 2


def test_radix_cache_log_is_off_by_default_and_off_drops_it():
    cache = RadixCache(8, 1)
    put(cache, array("I", [1, 2, 3]), 1)
    cache.evict(1)
    assert cache.take_evicted() == array("Q")
    cache.log_evictions(True)
    cache.evict(1)
    cache.log_evictions(False)
    cache.log_evictions(True)
    assert cache.take_evicted() == array("Q")
    cache.evict(1)
    assert cache.take_evicted() == Prompt.from_tokens([1, 2, 3]).block_hashes(1)[:1]


def test_radix_cache_absent_only_skips_pages_back_on_the_tree():
    cache = RadixCache(4, 1)
    cache.log_evictions(True)
    put(cache, array("I", [1, 2, 3]), 1)
    assert cache.evict(2) == 2           # trims pages 3 and 2
    put(cache, array("I", [1, 2]), 2)    # 2 is computed again
    chain = Prompt.from_tokens([1, 2, 3]).block_hashes(1)
    assert cache.take_evicted(absent_only=True) == array("Q", [chain[2]])
    assert cache.evict(2) == 2
    assert cache.take_evicted() == array("Q", [chain[1], chain[0]])

"""The KV block pool's documented rules on small hand-made cases, both backends.

The rules are the reference's vLLM G1 pool (vllm_block_pool.rs and
kv_manager/vllm_backend.rs): free blocks before evictions, eviction from the
LRU head, tables released leaf first, all-or-nothing reservations that pin
their own prefix hits, several physical copies per hash with the oldest one
serving prefix hits.
"""

from array import array

import pytest

from aisimulate_core import native
from aisimulate_core.errors import NativeError
from aisimulate_core.kv.block_pool import BlockPool

BACKENDS = ["python"] + (["c"] if native.lib is not None else [])


@pytest.fixture(params=BACKENDS)
def make_pool(request):
    pools = []

    def make(num_blocks):
        pool = BlockPool(num_blocks, backend=request.param)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.check()


def H(*values):
    return array("Q", values)


def computed(pool, hashes):
    """A finished request: allocate, commit every block, release."""
    seq = pool.new_seq()
    assert pool.allocate(seq, len(hashes))
    pool.commit(seq, hashes, 0, len(hashes))
    pool.release(seq)


def counts(pool):
    return (pool.free_blocks(), pool.inactive(), pool.active(), pool.cached())


def test_fresh_pool_and_backend_choice(make_pool):
    pool = make_pool(8)
    assert pool.num_blocks == 8
    assert pool.allocatable() == 8
    assert counts(pool) == (8, 0, 0, 0)
    assert pool.backend in ("c", "python")


def test_default_backend_follows_the_environment():
    assert BlockPool(4).backend == native.BACKEND


def test_block_ids_are_handed_out_lowest_first(make_pool):
    pool = make_pool(4)
    seq = pool.new_seq()
    assert pool.allocate(seq, 3)
    assert pool.seq_blocks(seq) == [0, 1, 2]
    assert pool.seq_len(seq) == 3
    # from a start on (the offload rank's fresh blocks and store sources)
    assert pool.seq_blocks(seq, 1) == [1, 2]
    assert pool.seq_blocks(seq, 3) == []
    assert pool.seq_blocks(seq, 5) == []


def test_free_blocks_are_used_before_any_eviction(make_pool):
    pool = make_pool(4)
    computed(pool, H(1, 2))
    seq = pool.new_seq()
    assert pool.allocate(seq, 2)
    assert pool.evictions == 0
    assert pool.match(H(1, 2)) == 2
    assert pool.allocate(seq, 1)
    assert pool.evictions == 1


def test_release_enters_the_lru_leaf_first_so_leaves_are_evicted_first(make_pool):
    pool = make_pool(3)
    computed(pool, H(10, 11, 12))
    assert counts(pool) == (0, 3, 0, 3)
    seq = pool.new_seq()
    survivors = []
    for _ in range(3):
        assert pool.allocate(seq, 1)
        survivors.append(pool.match(H(10, 11, 12)))
    assert survivors == [2, 1, 0]


def test_lru_evicts_the_earliest_released_request_first(make_pool):
    pool = make_pool(2)
    computed(pool, H(1))
    computed(pool, H(2))
    seq = pool.new_seq()
    assert pool.allocate(seq, 1)
    assert (pool.match(H(1)), pool.match(H(2))) == (0, 1)


def test_allocation_is_all_or_nothing(make_pool):
    pool = make_pool(4)
    computed(pool, H(1))
    seq = pool.new_seq()
    assert pool.allocate(seq, 2)
    before = counts(pool)
    assert not pool.allocate(seq, 3)
    assert counts(pool) == before
    assert pool.seq_len(seq) == 2
    other = pool.new_seq()
    assert not pool.allocate_each(array("i", [seq, other]), 2)
    assert counts(pool) == before
    assert pool.allocate_each(array("i", [seq, other]), 0)
    assert pool.allocate(seq, 2)  # one free block, then evicts hash 1
    assert pool.match(H(1)) == 0


def test_allocate_each_serves_the_listed_sequences_in_order(make_pool):
    pool = make_pool(6)
    a, b = pool.new_seq(), pool.new_seq()
    assert pool.allocate_each([a, b, a], 1)
    assert pool.seq_blocks(a) == [0, 2]
    assert pool.seq_blocks(b) == [1]
    assert pool.allocate_each(array("i", [b]), 3)
    assert pool.allocatable() == 0


def test_prefix_hit_reactivates_inactive_blocks(make_pool):
    pool = make_pool(4)
    computed(pool, H(1, 2, 3))
    assert pool.match(H(1, 2, 3, 4)) == 3
    assert pool.match(H(9, 1, 2), start=1) == 2
    seq = pool.new_seq()
    pool.acquire(seq, H(1, 2, 3, 4), 0, 2)
    assert counts(pool) == (1, 1, 2, 3)
    assert pool.allocatable() == 2
    other = pool.new_seq()
    assert pool.allocate(other, 2)  # the free block, then hash 3: hits are not evictable
    assert pool.match(H(1, 2, 3)) == 2
    assert not pool.allocate(other, 1)


def test_match_counts_reports_which_hits_are_referenced(make_pool):
    pool = make_pool(4)
    computed(pool, H(1, 2, 3))
    seq = pool.new_seq()
    pool.acquire(seq, H(1, 2), 0, 2)
    assert pool.match_counts(H(1, 2, 3, 4)) == (3, 2)
    assert pool.match_counts(H(1, 2, 3), start=1) == (2, 1)
    assert pool.match_counts(H(4)) == (0, 0)


def test_a_shared_block_goes_inactive_only_when_its_last_holder_releases(make_pool):
    pool = make_pool(4)
    computed(pool, H(5))
    a, b = pool.new_seq(), pool.new_seq()
    pool.acquire(a, H(5), 0, 1)
    pool.acquire(b, H(5), 0, 1)
    assert counts(pool) == (3, 0, 1, 1)
    pool.release(a)
    assert counts(pool) == (3, 0, 1, 1)
    pool.release(b)
    assert counts(pool) == (3, 1, 0, 1)


def test_acquire_allocate_pins_its_hits_before_evicting(make_pool):
    pool = make_pool(1)
    computed(pool, H(9))
    seq = pool.new_seq()
    assert not pool.acquire_allocate(seq, H(9), 0, 1, 1)
    assert counts(pool) == (0, 1, 0, 1)
    assert pool.seq_len(seq) == 0
    assert pool.acquire_allocate(seq, H(9), 0, 1, 0)
    assert pool.seq_blocks(seq) == [0]


def test_acquire_allocate_puts_hits_first_and_may_evict_other_blocks(make_pool):
    pool = make_pool(3)
    computed(pool, H(1, 2))
    computed(pool, H(7))
    seq = pool.new_seq()
    assert pool.acquire_allocate(seq, H(1, 2, 3), 0, 2, 1)
    assert pool.seq_len(seq) == 3
    assert pool.match(H(7)) == 0  # evicted to make room
    assert pool.seq_blocks(seq)[:2] == [0, 1]


def test_duplicate_hashes_take_distinct_capacity(make_pool):
    pool = make_pool(2)
    a, b = pool.new_seq(), pool.new_seq()
    for seq in (a, b):
        assert pool.allocate(seq, 1)
        pool.commit(seq, H(7), 0, 1)
    assert counts(pool) == (0, 0, 2, 2)
    third = pool.new_seq()
    assert not pool.allocate(third, 1)


def test_prefix_hits_take_the_oldest_copy_and_eviction_promotes_the_next(make_pool):
    pool = make_pool(4)
    copies = []
    for _ in range(3):
        seq = pool.new_seq()
        assert pool.allocate(seq, 1)
        pool.commit(seq, H(3), 0, 1)
        copies.append((seq, pool.seq_blocks(seq)[0]))
    for seq, _ in copies:
        pool.release(seq)
    reader = pool.new_seq()
    pool.acquire(reader, H(3), 0, 1)
    assert pool.seq_blocks(reader) == [copies[0][1]]
    pool.release(reader)  # the primary goes back to the LRU tail
    filler = pool.new_seq()
    assert pool.allocate(filler, 2)  # free block, then the second copy (LRU head)
    assert pool.evictions == 1
    reader = pool.new_seq()
    pool.acquire(reader, H(3), 0, 1)
    assert pool.seq_blocks(reader) == [copies[0][1]]
    pool.release(reader)
    assert pool.allocate(filler, 1)  # third copy
    assert pool.allocate(filler, 1)  # primary, the last copy: the hash is gone
    assert pool.match(H(3)) == 0
    assert pool.cached() == 0


def test_evicting_the_primary_promotes_the_oldest_duplicate(make_pool):
    pool = make_pool(3)
    seqs = []
    for _ in range(3):
        seq = pool.new_seq()
        assert pool.allocate(seq, 1)
        pool.commit(seq, H(4), 0, 1)
        seqs.append(seq)
    blocks = [pool.seq_blocks(seq)[0] for seq in seqs]
    for seq in seqs:
        pool.release(seq)
    filler = pool.new_seq()
    assert pool.allocate(filler, 1)  # evicts the primary (released first)
    reader = pool.new_seq()
    pool.acquire(reader, H(4), 0, 1)
    assert pool.seq_blocks(reader) == [blocks[1]]


def test_commit_skips_blocks_already_hashed(make_pool):
    pool = make_pool(4)
    computed(pool, H(1))
    seq = pool.new_seq()
    assert pool.acquire_allocate(seq, H(1, 2), 0, 1, 1)
    pool.commit(seq, H(1, 2), 0, 2)
    assert pool.cached() == 2
    pool.release(seq)
    assert counts(pool) == (2, 2, 0, 2)


def test_commit_of_a_middle_range_uses_the_matching_hashes(make_pool):
    pool = make_pool(4)
    seq = pool.new_seq()
    assert pool.allocate(seq, 3)
    pool.commit(seq, H(1, 2, 3), 1, 2)
    assert pool.match(H(2, 3)) == 2
    assert pool.match(H(1)) == 0


def test_sequence_handles_are_reused(make_pool):
    pool = make_pool(2)
    a, b = pool.new_seq(), pool.new_seq()
    pool.release(a)
    assert pool.new_seq() == a
    assert pool.live_seqs() == 2
    assert b != a


def test_hashes_may_be_lists_or_bytes(make_pool):
    pool = make_pool(4)
    computed(pool, [1, 2])
    assert pool.match([1, 2, 3]) == 2
    assert pool.match(H(1, 2).tobytes()) == 2
    seq = pool.new_seq()
    pool.acquire(seq, bytearray(H(1, 2).tobytes()), 0, 2)
    assert pool.seq_len(seq) == 2


def test_misuse_raises_clear_errors_and_changes_nothing(make_pool):
    pool = make_pool(4)
    computed(pool, H(1))
    seq = pool.new_seq()
    before = counts(pool)
    with pytest.raises(NativeError, match=r"acquire\(seq=\d+\) failed: a block hash has no resident"):
        pool.acquire(seq, H(1, 2), 0, 2)
    assert counts(pool) == before and pool.seq_len(seq) == 0
    with pytest.raises(NativeError, match=r"unknown or released sequence handle \(AISIM_EBADSEQ\)"):
        pool.allocate(99, 1)
    with pytest.raises(NativeError, match="AISIM_EBADSEQ"):
        pool.allocate_each([seq, 42], 1)
    with pytest.raises(ValueError, match=r"hashes\[1:3\] is outside 2 hashes"):
        pool.acquire(seq, H(1, 2), 1, 2)
    with pytest.raises(ValueError, match="k must be >= 0"):
        pool.allocate(seq, -1)
    with pytest.raises(ValueError, match=r"blocks \[0, 1\) exceed the table of 0"):
        pool.commit(seq, H(5), 0, 1)
    assert pool.allocate(seq, 1)
    pool.commit(seq, H(5), 0, 1)
    with pytest.raises(NativeError, match="already committed under another hash"):
        pool.commit(seq, H(6), 0, 1)
    pool.release(seq)
    with pytest.raises(NativeError, match=r"release\(seq=\d+\) failed"):
        pool.release(seq)
    with pytest.raises(ValueError, match="num_blocks must be in"):
        BlockPool(0, backend=pool.backend)


def test_check_detects_a_corrupted_twin():
    pool = BlockPool(4, backend="python")
    computed(pool, H(1, 2))
    pool.check()
    pool._ref[0] = 3
    with pytest.raises(NativeError, match="BlockPool.check failed"):
        pool.check()


_WITHOUT_NATIVE = """
import sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "aisimulate_core._native":
            raise ImportError("hidden for the test")
sys.meta_path.insert(0, Hide())
try:
    from aisimulate_core import native
except Exception as exc:
    print(type(exc).__name__, exc)
else:
    from aisimulate_core.kv.block_pool import BlockPool
    print(native.BACKEND, BlockPool(2).backend)
"""


@pytest.mark.parametrize(
    "env, expected",
    [
        ("auto", "python python"),
        ("python", "python python"),
        ("c", "NativeError AISIMULATE_BACKEND asks for the C backend but aisimulate_core._native"),
    ],
)
def test_backend_selection_without_the_compiled_module(env, expected):
    import os
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_NATIVE],
        capture_output=True,
        text=True,
        env={**os.environ, "AISIMULATE_BACKEND": env},
        check=True,
    )
    assert result.stdout.startswith(expected)

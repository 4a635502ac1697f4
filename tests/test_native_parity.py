"""The C core and its Python twins, driven by the same seeded random operations.

Every result is compared: return values, exception types and messages,
counters, physical block ids, and the pools' consistency checks.
"""

import math
import random
from array import array

import pytest

from aisimulate_core import native
from aisimulate_core.kv.block_pool import BlockPool
from aisimulate_core.kv.hashing import seq_hashes, seq_hashes_runs
from aisimulate_core.runtime.event_queue import EventQueue
from aisimulate_core.workload.rng import StdRng

pytestmark = pytest.mark.skipif(native.lib is None, reason="C core not built")


def outcome(call, *args):
    try:
        return ("ok", call(*args))
    except Exception as exc:  # the twins must fail identically
        return ("error", type(exc).__name__, str(exc))


class Twins:
    """Applies one operation to both pools and asserts identical outcomes."""

    def __init__(self, num_blocks):
        self.c = BlockPool(num_blocks, backend="c")
        self.py = BlockPool(num_blocks, backend="python")
        assert (self.c.backend, self.py.backend) == ("c", "python")

    def __call__(self, method, *args):
        got_c = outcome(getattr(self.c, method), *args)
        got_py = outcome(getattr(self.py, method), *args)
        assert got_c == got_py, (method, args)
        assert self.counters(self.c) == self.counters(self.py), (method, args)
        return got_c

    @staticmethod
    def counters(pool):
        return (
            pool.num_blocks,
            pool.allocatable(),
            pool.free_blocks(),
            pool.inactive(),
            pool.active(),
            pool.cached(),
            pool.live_seqs(),
            pool.evictions,
        )

    def compare_tables(self, seqs):
        for seq in seqs:
            assert self.c.seq_blocks(seq) == self.py.seq_blocks(seq)
        self.c.check()
        self.py.check()


class Workload:
    """Prompts that share prefixes, as chains of block hashes."""

    def __init__(self, rnd):
        self.rnd = rnd
        self.chains = []
        self.next_hash = 1

    def fresh(self, n):
        hashes = list(range(self.next_hash, self.next_hash + n))
        self.next_hash += n
        return hashes

    def chain(self):
        rnd = self.rnd
        if self.chains and rnd.random() < 0.7:
            base = rnd.choice(self.chains)
            prefix = base[: rnd.randint(0, len(base))]
        else:
            prefix = []
        chain = array("Q", prefix + self.fresh(rnd.randint(0, 6)))
        self.chains.append(list(chain))
        return chain


@pytest.mark.parametrize("seed", range(6))
def test_block_pool_twins_agree_on_random_operations(seed):
    rnd = random.Random(seed)
    twins = Twins(rnd.randint(4, 40))
    run_random_operations(twins, rnd, 3000)
    assert twins.c.evictions > 10  # the LRU path was exercised


@pytest.mark.parametrize("seed", range(6))
def test_block_pool_twins_log_the_same_evictions(seed):
    """With the eviction log on (turned off and on again now and then), both twins log the
    same hashes in the same order, and skip the same ones when a take asks for the absent
    only; the takes never get more than the copies evicted."""
    rnd = random.Random(1000 + seed)
    twins = Twins(rnd.randint(4, 40))
    twins("log_evictions", True)
    logged = run_random_operations(twins, rnd, 3000, log=True)
    logged += len(twins("take_evicted")[1])
    assert 10 < logged <= twins.c.evictions


@pytest.mark.parametrize("num_blocks", [300, 2**40, 2**64 - 1])
def test_lazy_pools_agree_while_they_grow(num_blocks):
    """Pools keep state only for the blocks handed out: large capacities grow as they are
    used (arrays and index doubling past 64 blocks), with the same ids in both twins."""
    rnd = random.Random(num_blocks)
    twins = Twins(num_blocks)
    assert twins.c.free_blocks() == num_blocks
    run_random_operations(twins, rnd, 3000, big=True)
    seq = twins("new_seq")[1]
    assert twins("allocate", seq, min(500, twins.c.allocatable())) == ("ok", True)
    twins.compare_tables([seq])
    assert max(twins.c.seq_blocks(seq)) >= 64  # grown past the first arrays


def run_random_operations(twins, rnd, steps, big=False, log=False):
    """Random pool operations on both twins; ``big`` allocates more per call; ``log`` takes
    (and compares) the eviction logs between operations and toggles logging now and then,
    returning how many hashes the takes got."""
    work = Workload(rnd)
    live = {}  # seq -> its prompt chain
    scale = 40 if big else 1
    logged = 0

    for step in range(steps):
        if log:
            draw = rnd.random()
            if draw < 0.1:  # half of the takes skip the hashes resident again
                logged += len(twins("take_evicted", draw < 0.05)[1])
            elif draw < 0.102:
                twins("log_evictions", draw < 0.101)
        op = rnd.random()
        seqs = list(live)
        if op < 0.12 or not seqs:
            kind, seq = twins("new_seq")
            assert kind == "ok"
            live[seq] = chain = work.chain()
            if rnd.random() < 0.3:  # computed without a prefix lookup: duplicate copies
                if twins("allocate", seq, len(chain))[1]:
                    twins("commit", seq, chain, 0, len(chain))
        elif op < 0.27:
            seq = rnd.choice(seqs)
            chain = live[seq]
            start = twins.c.seq_len(seq)
            if start <= len(chain):
                result = twins("match", chain, start)
                twins("match_counts", chain, start)
                hit = result[1] + (1 if rnd.random() < 0.1 else 0)  # sometimes one too many
                twins("acquire", seq, chain, start, min(hit, len(chain) - start))
        elif op < 0.40:
            seq = rnd.choice(seqs)
            chain = live[seq]
            start = twins.c.seq_len(seq)
            hit = twins("match", chain, start)[1] if start <= len(chain) else 0
            twins("acquire_allocate", seq, chain, min(start, len(chain)), hit, rnd.randint(0, 4))
        elif op < 0.55:
            twins("allocate", rnd.choice(seqs), rnd.randint(0, 5 * scale))
        elif op < 0.63:
            chosen = [rnd.choice(seqs) for _ in range(rnd.randint(0, 4))]
            twins("allocate_each", array("i", chosen), rnd.randint(0, 2))
        elif op < 0.80:
            seq = rnd.choice(seqs)
            chain = live[seq] if rnd.random() < 0.95 else work.chain()
            length = min(twins.c.seq_len(seq), len(chain))
            first = rnd.randint(0, length)
            twins("commit", seq, chain, first, rnd.randint(0, length - first))
        elif op < 0.93:
            seq = rnd.choice(seqs)
            twins("release", seq)
            del live[seq]
        elif op < 0.97:
            chain = rnd.choice(work.chains) if work.chains else []
            twins("match_counts", chain, rnd.randint(0, len(chain)))
        else:
            # misuse: stale or unknown handles, spans beyond the hashes
            bad = rnd.choice([-1, 10**4, max(seqs) + 1])
            twins("allocate", bad, 1)
            twins("release", bad)
            twins("acquire", rnd.choice(seqs), array("Q", [1, 2]), 1, 5)
        if step % 97 == 0:
            twins.compare_tables(live)
    twins.compare_tables(live)
    for seq in list(live):
        twins("release", seq)
    assert twins.c.active() == 0
    twins.compare_tables([])
    return logged


@pytest.mark.parametrize("seed", range(4))
def test_event_queue_twins_agree_including_ties(seed):
    rnd = random.Random(seed)
    c, py = EventQueue(backend="c"), EventQueue(backend="python")
    times = [0.0, 1.5, 2.0, 2.0, 7.25, math.inf, -3.0]
    for step in range(5000):
        if rnd.random() < 0.55:
            time_ms = rnd.choice(times) if rnd.random() < 0.6 else rnd.uniform(-10, 100)
            event = (time_ms, rnd.randint(-5, 5), rnd.randint(-(2**63), 2**63 - 1))
            c.push(*event)
            py.push(*event)
        else:
            assert outcome(c.pop) == outcome(py.pop)
        assert len(c) == len(py)
        assert c.peek_time() == py.peek_time()
    while len(py):
        assert c.pop() == py.pop()
    assert outcome(c.pop) == outcome(py.pop) == (
        "error",
        "IndexError",
        "EventQueue.pop: the queue is empty",
    )
    assert c.peek_time() == py.peek_time() == math.inf
    assert outcome(c.push, math.nan, 1, 1) == outcome(py.push, math.nan, 1, 1)


def test_event_queue_breaks_ties_by_insertion_order():
    for backend in ("c", "python"):
        queue = EventQueue(backend=backend)
        for ident in range(5):
            queue.push(3.0, 7, ident)
        queue.push(1.0, 2, 99)
        assert [queue.pop() for _ in range(6)] == [(1.0, 2, 99)] + [(3.0, 7, i) for i in range(5)]


@pytest.mark.parametrize("seed", range(5))
def test_hashing_twins_agree(seed):
    rnd = random.Random(seed)
    for _ in range(60):
        block_size = rnd.randint(1, 20)
        tokens = array("I", (rnd.randrange(2**32) if rnd.random() < 0.3 else rnd.randrange(50)
                             for _ in range(rnd.randint(0, 130))))  # fmt: skip
        parent = rnd.choice([None, 0, rnd.randrange(2**64)])
        c = seq_hashes(tokens, block_size, parent, backend="c")
        py = seq_hashes(tokens, block_size, parent, backend="python")
        assert c == py
        assert len(c) == len(tokens) // block_size
        values = array("I", (rnd.randrange(6) for _ in range(rnd.randint(0, 12))))
        lengths = array("I", (rnd.choice([0, 1, 3, block_size, 2 * block_size + 1]) for _ in values))
        expanded = array("I", (v for v, n in zip(values, lengths) for _ in range(n)))
        expected = seq_hashes(expanded, block_size, parent, backend="python")
        assert seq_hashes_runs(values, lengths, block_size, parent, backend="c") == expected
        assert seq_hashes_runs(values, lengths, block_size, parent, backend="python") == expected


@pytest.mark.parametrize("backend", ["c", "python"])
def test_hash_chains_share_exactly_the_common_block_prefix(backend):
    a = seq_hashes(array("I", range(64)), 16, backend=backend)
    b = seq_hashes(array("I", list(range(40)) + [999] * 24), 16, backend=backend)
    assert a[:2] == b[:2] and a[2] != b[2] and a[3] != b[3]
    assert len(set(a)) == 4
    # continuing a chain from its last hash equals hashing the whole prompt
    tail = seq_hashes(array("I", range(32, 64)), 16, parent=a[1], backend=backend)
    assert tail == a[2:]
    # the same block content at another position hashes differently
    repeated = seq_hashes(array("I", [7] * 48), 16, backend=backend)
    assert len(set(repeated)) == 3
    assert seq_hashes([1, 2, 3], 4, backend=backend) == array("Q")


@pytest.mark.parametrize("backend", ["c", "python"])
def test_hashing_rejects_bad_arguments(backend):
    with pytest.raises(ValueError, match="block_size must be in"):
        seq_hashes([1, 2], 0, backend=backend)
    with pytest.raises(ValueError, match="parent must be a u64"):
        seq_hashes([1, 2], 1, parent=-1, backend=backend)
    with pytest.raises(ValueError, match="tokens must be u32"):
        seq_hashes([1, -2], 1, backend=backend)
    with pytest.raises(ValueError, match="differ in length"):
        seq_hashes_runs([1, 2], [3], 2, backend=backend)


def test_rng_twins_agree_on_mixed_draws():
    rnd = random.Random(11)
    c, py = StdRng(123, backend="c"), StdRng(123, backend="python")
    for _ in range(2000):
        pick = rnd.randrange(4)
        if pick == 0:
            assert c.next_u32() == py.next_u32()
        elif pick == 1:
            assert c.next_u64() == py.next_u64()
        elif pick == 2:
            assert c.next_f64() == py.next_f64()
        else:
            high = rnd.choice([2, 5, 1000, 2**32 - 1, 2**32 + 7, 2**64 - 1])
            assert c.gen_range(0, high) == py.gen_range(0, high)


def test_status_codes_match_the_c_enum():
    for value, name in native.STATUS_NAMES.items():
        assert getattr(native.lib, name) == value
        assert getattr(native, name.removeprefix("AISIM_")) == value

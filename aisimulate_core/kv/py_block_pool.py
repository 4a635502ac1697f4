"""Pure-Python twin of csrc/kv_pool.c: same rules, same physical block ids.

Read csrc/kv_pool.c for why the rules are what they are (they follow the
reference's vLLM G1 pool). This twin mirrors it step for step, including the
order of the free stack and the reuse of sequence handles, so that the parity
test can compare block ids and not just counts.
"""

from array import array

from aisimulate_core.errors import NativeError
from aisimulate_core.kv.block_pool import (
    BlockPool,
    EvictionLog,
    as_hashes,
    check_count,
    check_num_blocks,
    check_span,
    pool_label,
    pool_operation,
)
from aisimulate_core.native import (
    EBADSEQ,
    EHASHMISMATCH,
    EINVAL,
    ENOMEM,
    ENOTRESIDENT,
    status_error,
)

FREE, PRIVATE, CACHED = 0, 1, 2
NO_BLOCK = -1


class PyBlockPool(BlockPool):
    """The KV block pool in Python (see ``aisimulate_core.kv.block_pool.BlockPool``)."""

    backend = "python"

    def __init__(self, num_blocks, backend=None, *, owner=None):
        check_num_blocks(num_blocks, owner)
        self._label = pool_label(owner)
        try:
            self._allocate(num_blocks)
        except MemoryError:  # the C pool's AISIM_ENOMEM
            raise status_error(ENOMEM, pool_operation(owner), f"{num_blocks} blocks") from None

    def _allocate(self, num_blocks):
        # lazy, as in C: per-block lists hold the touched blocks 0..len-1 only; untouched ids
        # are handed out in ascending order after the released ones
        self._n = num_blocks
        self._ref = []
        self._hash = []
        self._state = []
        self._lru_prev = []
        self._lru_next = []
        self._dup_next = []
        self._lru_head = self._lru_tail = NO_BLOCK
        self._free_stack = []
        self._index = {}
        self._tables = []
        self._free_handles = []
        self._inactive = 0
        self._active = 0
        self._cached = 0
        self._live_seqs = 0
        self.evictions = 0
        self._eviction_log = EvictionLog(lambda: array("Q"))

    # ------------------------------------------------------------ counters

    @property
    def num_blocks(self):
        return self._n

    def allocatable(self):
        return self.free_blocks() + self._inactive

    def free_blocks(self):
        return len(self._free_stack) + self._n - len(self._ref)

    def inactive(self):
        return self._inactive

    def active(self):
        return self._active

    def cached(self):
        return self._cached

    def live_seqs(self):
        return self._live_seqs

    # ----------------------------------------------------------- sequences

    def _table(self, operation, seq):
        tables = self._tables
        if 0 <= seq < len(tables):
            table = tables[seq]
            if table is not None:
                return table
        raise status_error(EBADSEQ, f"{self._named(operation)}(seq={seq})")

    def new_seq(self):
        if self._free_handles:
            seq = self._free_handles.pop()
            self._tables[seq] = []
        else:
            seq = len(self._tables)
            self._tables.append([])
        self._live_seqs += 1
        return seq

    def seq_len(self, seq):
        return len(self._table("BlockPool.seq_len", seq))

    def seq_blocks(self, seq, start=0):
        return list(self._table("BlockPool.seq_blocks", seq)[max(start, 0):])

    # ----------------------------------------------------------- lookup

    def match(self, hashes, start=0):
        return self.match_counts(hashes, start)[0]

    def match_counts(self, hashes, start=0):
        hashes = as_hashes(hashes)
        total = len(hashes)
        check_span("BlockPool.match", total, start, 0)
        index, ref = self._index, self._ref
        position, active = start, 0
        while position < total:
            block = index.get(hashes[position])
            if block is None:
                break
            active += ref[block] > 0
            position += 1
        return position - start, active

    def _all_resident(self, hashes, start, count):
        index = self._index
        return all(hashes[i] in index for i in range(start, start + count))

    def _take_ref(self, table, block):
        if self._ref[block] == 0:
            self._lru_unlink(block)
            self._active += 1
        self._ref[block] += 1
        table.append(block)

    def acquire(self, seq, hashes, start, n):
        operation = "BlockPool.acquire"
        hashes = as_hashes(hashes)
        check_span(operation, len(hashes), start, n)
        table = self._table(operation, seq)
        if not self._all_resident(hashes, start, n):
            raise status_error(ENOTRESIDENT, f"{self._named(operation)}(seq={seq})")
        index = self._index
        for i in range(start, start + n):
            self._take_ref(table, index[hashes[i]])

    # ------------------------------------------------------------ LRU list

    def _lru_append(self, block):
        tail = self._lru_tail
        self._lru_prev[block] = tail
        self._lru_next[block] = NO_BLOCK
        if tail != NO_BLOCK:
            self._lru_next[tail] = block
        else:
            self._lru_head = block
        self._lru_tail = block
        self._inactive += 1

    def _lru_unlink(self, block):
        prev, nxt = self._lru_prev[block], self._lru_next[block]
        if prev != NO_BLOCK:
            self._lru_next[prev] = nxt
        else:
            self._lru_head = nxt
        if nxt != NO_BLOCK:
            self._lru_prev[nxt] = prev
        else:
            self._lru_tail = prev
        self._lru_prev[block] = self._lru_next[block] = NO_BLOCK
        self._inactive -= 1

    # ---------------------------------------------------------- allocation

    def _forget_copy(self, block):
        """Take ``block`` off its hash's copies; True when it was the last one."""
        key = self._hash[block]
        primary = self._index[key]
        dup_next = self._dup_next
        last = False
        if primary == block:
            if dup_next[block] == NO_BLOCK:
                del self._index[key]
                last = True
            else:
                self._index[key] = dup_next[block]
        else:
            prev = primary
            while dup_next[prev] != block:
                prev = dup_next[prev]
            dup_next[prev] = dup_next[block]
        dup_next[block] = NO_BLOCK
        return last

    def _take_fresh_block(self):
        if self._free_stack:
            block = self._free_stack.pop()
        elif len(self._ref) < self._n:
            block = self._touch()
        else:
            block = self._lru_head
            self._lru_unlink(block)
            if self._forget_copy(block):
                logged = self._eviction_log.entries
                if logged is not None:
                    logged.append(self._hash[block])
            self._hash[block] = 0
            self._cached -= 1
            self.evictions += 1
        self._state[block] = PRIVATE
        self._ref[block] = 1
        self._active += 1
        return block

    def _touch(self):
        """The lowest untouched block, given its state (as the C pool's reserve_touched)."""
        block = len(self._ref)
        if block >= 0x7FFF_FFFF:
            raise status_error(ENOMEM, f"{self._label}.allocate", "block ids are int32")
        self._ref.append(0)
        self._hash.append(0)
        self._state.append(FREE)
        self._lru_prev.append(NO_BLOCK)
        self._lru_next.append(NO_BLOCK)
        self._dup_next.append(NO_BLOCK)
        return block

    def _append_fresh(self, table, k):
        for _ in range(k):
            table.append(self._take_fresh_block())

    def allocate(self, seq, k):
        operation = "BlockPool.allocate"
        check_count(operation, "k", k)
        table = self._table(operation, seq)
        if k > self.allocatable():
            return False
        self._append_fresh(table, k)
        return True

    def _distinct_inactive_hits(self, hashes, start, count):
        index, ref = self._index, self._ref
        return len({b for b in (index[hashes[i]] for i in range(start, start + count)) if ref[b] == 0})

    def acquire_allocate(self, seq, hashes, start, n, k):
        operation = "BlockPool.acquire_allocate"
        hashes = as_hashes(hashes)
        check_span(operation, len(hashes), start, n)
        check_count(operation, "k", k)
        table = self._table(operation, seq)
        if not self._all_resident(hashes, start, n):
            raise status_error(ENOTRESIDENT, f"{self._named(operation)}(seq={seq})")
        free = self.free_blocks()
        if k > free:
            evictable = self._inactive - self._distinct_inactive_hits(hashes, start, n)
            if k - free > evictable:
                return False
        index = self._index
        for i in range(start, start + n):
            self._take_ref(table, index[hashes[i]])
        self._append_fresh(table, k)
        return True

    def allocate_each(self, seqs, k_each=1):
        operation = "BlockPool.allocate_each"
        check_count(operation, "k_each", k_each)
        tables = [self._table(operation, seq) for seq in seqs]
        if len(tables) * k_each > self.allocatable():
            return False
        for table in tables:
            self._append_fresh(table, k_each)
        return True

    # -------------------------------------------------------------- commit

    def commit(self, seq, hashes, first_block, count):
        operation = "BlockPool.commit"
        hashes = as_hashes(hashes)
        check_span(operation, len(hashes), first_block, count)
        table = self._table(operation, seq)
        if first_block + count > len(table):
            raise status_error(
                EINVAL,
                f"{self._named(operation)}(seq={seq})",
                f"blocks [{first_block}, {first_block + count}) exceed the table of {len(table)}",
            )
        state, block_hash = self._state, self._hash
        for i in range(first_block, first_block + count):
            block = table[i]
            if state[block] == CACHED and block_hash[block] != hashes[i]:
                raise status_error(EHASHMISMATCH, f"{self._named(operation)}(seq={seq})")
        index, dup_next = self._index, self._dup_next
        for i in range(first_block, first_block + count):
            block = table[i]
            if state[block] == CACHED:
                continue
            key = hashes[i]
            state[block] = CACHED
            block_hash[block] = key
            dup_next[block] = NO_BLOCK
            self._cached += 1
            primary = index.get(key, NO_BLOCK)
            if primary == NO_BLOCK:
                index[key] = block
            else:
                while dup_next[primary] != NO_BLOCK:
                    primary = dup_next[primary]
                dup_next[primary] = block

    # ------------------------------------------------------------- release

    def release(self, seq):
        table = self._table("BlockPool.release", seq)
        ref, state = self._ref, self._state
        for block in reversed(table):
            ref[block] -= 1
            if ref[block]:
                continue
            self._active -= 1
            if state[block] == CACHED:
                self._lru_append(block)
            else:
                state[block] = FREE
                self._free_stack.append(block)
        self._tables[seq] = None
        self._free_handles.append(seq)
        self._live_seqs -= 1

    # -------------------------------------------------------- eviction log

    def log_evictions(self, enabled):
        self._eviction_log.enable(enabled)

    def take_evicted(self, absent_only=False):
        evicted = self._eviction_log.take()
        if evicted is None:
            return array("Q")
        if absent_only:
            index = self._index
            return array("Q", [key for key in evicted if key not in index])
        return evicted

    # --------------------------------------------------------------- check

    def check(self):
        """Raise NativeError if counters, lists, index or references disagree."""
        problem = self._find_problem()
        if problem:
            raise NativeError(f"BlockPool.check failed: {problem}")

    def _find_problem(self):
        n, ref, state = len(self._ref), self._ref, self._state  # the touched blocks
        listed = [0] * n
        for block in self._free_stack:
            if state[block] != FREE or ref[block] or listed[block]:
                return f"free stack holds block {block} in a wrong state"
            listed[block] = 1
        prev, block, count = NO_BLOCK, self._lru_head, 0
        while block != NO_BLOCK:
            if count >= n or listed[block] or state[block] != CACHED or ref[block]:
                return f"LRU list holds block {block} in a wrong state"
            if self._lru_prev[block] != prev:
                return f"LRU back link of block {block} is broken"
            listed[block] = 1
            prev, block, count = block, self._lru_next[block], count + 1
        if prev != self._lru_tail or count != self._inactive:
            return "LRU tail or length disagrees"
        for b in range(n):
            if bool(listed[b]) != (ref[b] == 0):
                return f"block {b} with ref {ref[b]} is misplaced"
            if state[b] == PRIVATE and ref[b] != 1:
                return f"private block {b} has ref {ref[b]}"
        copies = 0
        for key, primary in self._index.items():
            block, steps = primary, 0
            while block != NO_BLOCK:
                steps += 1
                if steps > n or state[block] != CACHED or self._hash[block] != key:
                    return f"copies of hash {key:#x} are inconsistent"
                copies += 1
                block = self._dup_next[block]
        cached = sum(1 for b in range(n) if state[b] == CACHED)
        if copies != cached or cached != self._cached:
            return "hash index does not cover the cached blocks"
        held = [0] * n
        for table in self._tables:
            for block in table or ():
                held[block] += 1
        if held != ref:
            return "reference counts disagree with the sequence tables"
        if sum(1 for r in ref if r) != self._active:
            return "active count drifted"
        if len(self._free_stack) + self._inactive + self._active != n:
            return "free + inactive + active != the blocks handed out"
        live = sum(1 for table in self._tables if table is not None)
        if live != self._live_seqs or live + len(self._free_handles) != len(self._tables):
            return "sequence handle accounting drifted"
        return None


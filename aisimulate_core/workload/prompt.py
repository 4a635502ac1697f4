"""Compact prompt forms: the engine hashes blocks without building per-token Python lists.

A trace prompt is runs of repeated canonical ids (one run per trace block, the last one maybe
partial); an authored prompt is an explicit token array. Blocks filled by output tokens the
workload did not author get hashes private to the request, so they are found again only by that
request (after a preemption), as with the reference's unique random outputs.

A prompt built from hash ids is lazy: its length is known at once, its run arrays are built
the first time an engine reads ``values`` / ``lengths`` (to hash or expand it). A request
rejected on its length alone (longer than ``max_model_len``, more blocks than a rank holds)
therefore never costs memory in proportion to its length.
"""

from __future__ import annotations

from array import array

from .. import native
from ..kv import hashing


class Prompt:
    __slots__ = ("length", "_values", "_lengths", "_source", "_hashes", "_hashes_block")

    def __init__(self, values, lengths):
        self._values = values             # array('I'): token value of each run
        self._lengths = lengths           # array('I'): run lengths
        self._source = None
        self.length = sum(lengths)
        # the block hashes at the block size asked last (a run has one block size per pool,
        # so one slot pair, not a dict per prompt)
        self._hashes = self._hashes_block = None

    @classmethod
    def from_tokens(cls, tokens):
        tokens = array("I", tokens)
        return cls(tokens, array("I", [1]) * len(tokens))

    @classmethod
    def from_hash_ids(cls, canonical_ids, input_length, trace_block_size):
        """Each id stands for ``trace_block_size`` copies of itself; the prompt is cut at length.

        ``canonical_ids`` is anything ``array('I', ids[:n])`` accepts (an array, a list, an
        ``IdRanges``); it is read when the runs are first needed."""
        prompt = cls.__new__(cls)
        prompt._values = prompt._lengths = None
        prompt._source = (canonical_ids, trace_block_size)
        prompt.length = input_length
        prompt._hashes = prompt._hashes_block = None
        return prompt

    def _build_runs(self):
        canonical_ids, block = self._source
        length = self.length
        n = -(-length // block)
        values = canonical_ids[:n]
        if type(values) is not array or values.typecode != "I":
            values = array("I", values)  # a slice of an array('I') is already a fresh one
        lengths = array("I", (block,)) * n
        if n:
            lengths[-1] = length - (n - 1) * block
        self._values = values
        self._lengths = lengths
        self._source = None

    @property
    def values(self):
        if self._values is None:
            self._build_runs()
        return self._values

    @property
    def lengths(self):
        if self._lengths is None:
            self._build_runs()
        return self._lengths

    def block_hashes(self, block_size):
        if self._hashes_block == block_size:
            return self._hashes
        if self._values is None:
            self._build_runs()
        hashes = hashing.seq_hashes_runs(self._values, self._lengths, block_size)
        self._hashes, self._hashes_block = hashes, block_size
        return hashes

    def extended_hashes(self, block_size, request, n_blocks):
        """Hashes of the first ``n_blocks`` blocks of prompt followed by generated tokens."""
        prompt_hashes = (self._hashes if self._hashes_block == block_size
                         else self.block_hashes(block_size))
        if n_blocks <= len(prompt_hashes):
            return prompt_hashes
        authored = request.output_token_ids
        if authored is None:
            # Outputs the workload did not author are unique to the request: only its own
            # readmission can find these blocks, so a chain salted with its uuid stands for
            # their content.
            parent = prompt_hashes[-1] if prompt_hashes else 0
            extra = hashing.seq_hashes_runs(
                array("I", [0]), array("I", [(n_blocks - len(prompt_hashes)) * block_size]),
                block_size, parent=(parent ^ (request.uuid * _GOLDEN)) & _MASK)
            return prompt_hashes + extra
        out_needed = n_blocks * block_size - self.length
        values = array("I", self.values)
        lengths = array("I", self.lengths)
        for token in authored[:out_needed]:
            values.append(token)
            lengths.append(1)
        return hashing.seq_hashes_runs(values, lengths, block_size)


class IdRanges:
    """Canonical ids given as consecutive ranges ``(first, count)``, read like an array: a
    synthetic prompt is a group prefix range then a fresh range, so it needs no id array until
    a prompt is built from it."""

    __slots__ = ("ranges",)

    def __init__(self, ranges):
        self.ranges = ranges

    def __len__(self):
        return sum(count for _, count in self.ranges)

    def __getitem__(self, index):
        if not isinstance(index, slice) or index.start not in (None, 0) or index.step is not None:
            raise TypeError("IdRanges supports only leading slices [:n]")
        ranges = self.ranges
        stop = index.stop
        if len(ranges) == 1:   # an ungrouped synthetic prompt: its fresh range alone
            first, count = ranges[0]
            left = count if stop is None or stop >= count else (stop if stop > 0 else 0)
            if left < _C_FILL_FROM:
                return array("I", range(first, first + left))
        total = len(self)
        left = total if stop is None else min(total, max(0, stop))
        if left >= _C_FILL_FROM and native.resolve_backend() == "c":
            out = _c_fill(self.ranges, left)
            if out is not None:
                return out
        out = array("I")
        for first, count in ranges:
            take = min(count, left)
            out.extend(range(first, first + take))
            left -= take
        return out


# below this many ids the loop is cheaper than the call's buffers
_C_FILL_FROM = 256


def _c_fill(ranges, n):
    """The first ``n`` ids in one C call, or None when the loop must say why it cannot."""
    try:
        firsts = array("I", [first for first, _ in ranges])
        counts = array("I", [count for _, count in ranges])
    except OverflowError:
        return None
    out = array("I", bytes(4 * n))
    ffi = native.ffi
    written = native.lib.aisim_fill_id_ranges(
        ffi.from_buffer("uint32_t[]", firsts), ffi.from_buffer("uint32_t[]", counts),
        len(firsts), ffi.from_buffer("uint32_t[]", out), n)
    return out if written == n else None


_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15

"""Compact prompt forms: the engine hashes blocks without building per-token Python lists.

A trace prompt is runs of repeated canonical ids (one run per trace block, the last one maybe
partial); an authored prompt is an explicit token array. Output tokens the workload did not
author are one value unique to the request, so blocks they fill are found again only by that
request (after a preemption), as with the reference's unique random outputs.
"""

from __future__ import annotations

from array import array

from ..kv import hashing

_OUTPUT_TAG = 0x8000_0000


class Prompt:
    __slots__ = ("length", "values", "lengths", "_hashes")

    def __init__(self, values, lengths):
        self.values = values              # array('I'): token value of each run
        self.lengths = lengths            # array('I'): run lengths
        self.length = sum(lengths)
        self._hashes = {}

    @classmethod
    def from_tokens(cls, tokens):
        tokens = array("I", tokens)
        return cls(tokens, array("I", [1]) * len(tokens))

    @classmethod
    def from_hash_ids(cls, canonical_ids, input_length, trace_block_size):
        """Each id stands for ``trace_block_size`` copies of itself; the prompt is cut at length."""
        n = -(-input_length // trace_block_size)
        values = array("I", canonical_ids[:n])
        lengths = array("I", [trace_block_size]) * n
        if n:
            lengths[-1] = input_length - (n - 1) * trace_block_size
        return cls(values, lengths)

    def block_hashes(self, block_size):
        hashes = self._hashes.get(block_size)
        if hashes is None:
            hashes = hashing.seq_hashes_runs(self.values, self.lengths, block_size)
            self._hashes[block_size] = hashes
        return hashes

    def extended_hashes(self, block_size, request, n_blocks):
        """Hashes of the first ``n_blocks`` blocks of prompt followed by generated tokens."""
        out_needed = n_blocks * block_size - self.length
        if out_needed <= 0:
            return self.block_hashes(block_size)
        values = array("I", self.values)
        lengths = array("I", self.lengths)
        authored = request.output_token_ids
        if authored is not None:
            for token in authored[:out_needed]:
                values.append(token)
                lengths.append(1)
        else:
            values.append(_OUTPUT_TAG | (request.uuid & 0x7FFF_FFFF))
            lengths.append(out_needed)
        return hashing.seq_hashes_runs(values, lengths, block_size)

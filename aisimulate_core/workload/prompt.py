"""Compact prompt forms: the engine hashes blocks without building per-token Python lists.

A trace prompt is runs of repeated canonical ids (one run per trace block, the last one maybe
partial); an authored prompt is an explicit token array. Blocks filled by output tokens the
workload did not author get hashes private to the request, so they are found again only by that
request (after a preemption), as with the reference's unique random outputs.
"""

from __future__ import annotations

from array import array

from ..kv import hashing

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
        prompt_hashes = self.block_hashes(block_size)
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


_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


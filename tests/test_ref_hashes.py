"""The reference's block hashes (kv/ref_hashes.py): XXH3-64 and the sequence-hash chain the
offload tiers key their entries by.

The expected values are the public XXH3 test vector of the empty input and what the
reference wheel's ``dynamo._core.compute_block_hash_for_seq`` returned for blocks of one
repeated token (recorded once; the wheel is not imported here).
"""

from __future__ import annotations

import struct

from aisimulate_core.kv.ref_hashes import SEED, ref_seq_hashes, xxh3_64
from aisimulate_core.workload.prompt import Prompt

# compute_block_hash_for_seq([t] * 16, 16) on the reference wheel
WHEEL_BLOCK_HASHES = {1: 13518392937921988335, 5: 9340675565616011363, 7: 8771127959296939342}


def test_xxh3_empty_input_vector():
    assert xxh3_64(b"", 0) == 0x2D06800538D394C2


def test_block_hashes_match_the_wheel():
    for token, expected in WHEEL_BLOCK_HASHES.items():
        assert xxh3_64(struct.pack("<16I", *[token] * 16), SEED) == expected


def test_every_length_path_is_deterministic_and_distinct():
    # the short, 17-128, 129-240 and long paths (with and without a seed) all answer, and
    # one changed byte changes the hash
    for n in (0, 1, 3, 4, 8, 9, 16, 17, 64, 128, 129, 240, 241, 1024, 1500):
        data = bytes((i * 7 + 3) & 0xFF for i in range(n))
        for seed in (0, SEED):
            h = xxh3_64(data, seed)
            assert 0 <= h < 1 << 64 and h == xxh3_64(data, seed)
            if n:
                assert xxh3_64(bytes([data[0] ^ 1]) + data[1:], seed) != h


def test_sequence_chain():
    prompt = Prompt.from_tokens([5] * 16 + [7] * 16 + [9] * 5)
    first, second = ref_seq_hashes(prompt, 16, 2)
    assert first == WHEEL_BLOCK_HASHES[5]
    assert second == xxh3_64(struct.pack("<QQ", first, WHEEL_BLOCK_HASHES[7]), SEED)
    # a block that mixes runs hashes its tokens
    mixed = Prompt.from_tokens([5] * 8 + [7] * 8)
    assert ref_seq_hashes(mixed, 16, 1)[0] == xxh3_64(struct.pack("<16I", *([5] * 8 + [7] * 8)), SEED)

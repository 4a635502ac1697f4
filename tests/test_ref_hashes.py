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


# ---------------------------------------------------------------- the C twin (csrc/ref_hashes.c)

import random  # noqa: E402
from array import array  # noqa: E402

import pytest  # noqa: E402

from aisimulate_core import native  # noqa: E402

needs_c = pytest.mark.skipif(native.lib is None, reason="the C core is not built")


@needs_c
def test_c_xxh3_equals_python_on_every_length_path():
    rng = random.Random(2026)
    for n in list(range(0, 300)) + [511, 512, 1023, 1024, 1025, 2048, 4096, 5000]:
        data = bytes(rng.randrange(256) for _ in range(n))
        for seed in (0, SEED, rng.randrange(1 << 64)):
            ours = native.lib.aisim_xxh3_64(native.ffi.from_buffer("uint8_t[]", data), n, seed)
            assert ours == xxh3_64(data, seed), (n, seed)


def _random_prompt(rng):
    runs = rng.randint(1, 12)
    values = array("I", [rng.choice((0, 1, 7, 0xFFFFFFFF, rng.randrange(1 << 32)))
                         for _ in range(runs)])
    lengths = array("I", [rng.choice((0, 1, 3, 16, 17, 31, 64, 512, rng.randint(1, 200)))
                          for _ in range(runs)])
    return Prompt(values, lengths)


@needs_c
def test_c_sequence_hashes_equal_python_on_random_prompts():
    rng = random.Random(7)
    for _ in range(400):
        prompt = _random_prompt(rng)
        block_size = rng.choice((1, 2, 4, 16, 32, 64, 128))
        n_blocks = prompt.length // block_size
        if rng.random() < 0.3 and n_blocks:
            n_blocks = rng.randint(0, n_blocks)
        c = ref_seq_hashes(prompt, block_size, n_blocks, backend="c")
        py = ref_seq_hashes(prompt, block_size, n_blocks, backend="python")
        assert c == py and len(c) == n_blocks


@needs_c
def test_c_sequence_hashes_refuse_more_blocks_than_the_prompt_has():
    prompt = Prompt(array("I", [3]), array("I", [40]))
    with pytest.raises(native.NativeArgumentError, match="fewer than 3 blocks of 16"):
        ref_seq_hashes(prompt, 16, 3, backend="c")

"""The reference's block sequence hashes (XXH3-64, seed 1337), for the offload tiers' order.

Our G1 pool identifies blocks by our own 64-bit hash (kv/hashing.py): only equality matters
there. The reference's host tier orders the blocks of one completed transfer by their sequence
hash (FEATURES.md §5.2, settled on the reference: ascending XXH3 hashes), so the tiers key their
entries by the reference's hash itself: a block's hash is XXH3-64 (seed 1337) of its tokens as
little-endian u32, and a later block's sequence hash is XXH3-64 (seed 1337) of the previous
sequence hash and the block hash, both little-endian u64 (SEMANTICS.md §1.1 step 3).

``xxh3_64(data, seed)`` is the XXH3 64-bit hash (the public xxHash algorithm, every length);
``ref_seq_hashes(prompt, block_size, n_blocks)`` the first ``n_blocks`` sequence hashes of a
prompt (``workload/prompt.Prompt``): one C call on the C backend (csrc/ref_hashes.c), this
module's Python otherwise (``backend="python"``, its twin; tests/test_ref_hashes.py compares
them on random prompts).
"""

from __future__ import annotations

import struct
from array import array

from aisimulate_core.native import EINVAL, ffi, lib, resolve_backend, status_error

M64 = (1 << 64) - 1
P32_1, P32_2, P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
P64_1, P64_2, P64_3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P64_4, P64_5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
MX1, MX2 = 0x165667919E3779F9, 0x9FB21C651E98DF25
SEED = 1337
SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e")
_Q = struct.Struct("<Q")
_I = struct.Struct("<I")


def _r64(b, i):
    return _Q.unpack_from(b, i)[0]


def _r32(b, i):
    return _I.unpack_from(b, i)[0]


def _fold(a, b):
    p = a * b
    return (p & M64) ^ (p >> 64)


def _avalanche(h):
    h ^= h >> 37
    h = (h * MX1) & M64
    return h ^ (h >> 32)


def _avalanche64(h):
    h ^= h >> 33
    h = (h * P64_2) & M64
    h ^= h >> 29
    h = (h * P64_3) & M64
    return h ^ (h >> 32)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _mix16(data, i, secret, s, seed):
    return _fold(_r64(data, i) ^ ((_r64(secret, s) + seed) & M64),
                 _r64(data, i + 8) ^ ((_r64(secret, s + 8) - seed) & M64))


def _short(data, n, seed):
    s = SECRET
    if n > 8:
        lo = _r64(data, 0) ^ (((_r64(s, 24) ^ _r64(s, 32)) + seed) & M64)
        hi = _r64(data, n - 8) ^ (((_r64(s, 40) ^ _r64(s, 48)) - seed) & M64)
        swapped = int.from_bytes(lo.to_bytes(8, "little"), "big")
        return _avalanche((n + swapped + hi + _fold(lo, hi)) & M64)
    if n >= 4:
        seed ^= (int.from_bytes((seed & 0xFFFFFFFF).to_bytes(4, "little"), "big")) << 32
        x = (_r32(data, n - 4) + (_r32(data, 0) << 32)) ^ (((_r64(s, 8) ^ _r64(s, 16)) - seed) & M64)
        x ^= _rotl(x, 49) ^ _rotl(x, 24)
        x = (x * MX2) & M64
        x ^= (x >> 35) + n
        x = (x * MX2) & M64
        return x ^ (x >> 28)
    if n:
        combined = (data[0] << 16) | (data[n >> 1] << 24) | data[n - 1] | (n << 8)
        return _avalanche64(combined ^ (((_r32(s, 0) ^ _r32(s, 4)) + seed) & M64))
    return _avalanche64(seed ^ _r64(s, 56) ^ _r64(s, 64))


def _accumulate(acc, data, i, secret, s):
    for lane in range(8):
        value = _r64(data, i + 8 * lane)
        key = value ^ _r64(secret, s + 8 * lane)
        acc[lane ^ 1] = (acc[lane ^ 1] + value) & M64
        acc[lane] = ((key & 0xFFFFFFFF) * (key >> 32) + acc[lane]) & M64


def _long(data, n, seed):
    secret = SECRET
    if seed:
        secret = b"".join(_Q.pack((_r64(SECRET, 16 * i) + seed) & M64)
                          + _Q.pack((_r64(SECRET, 16 * i + 8) - seed) & M64) for i in range(12))
    size = len(secret)
    acc = [P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1]
    stripes_per_block = (size - 64) // 8
    block_len = 64 * stripes_per_block
    blocks = (n - 1) // block_len
    for b in range(blocks):
        for k in range(stripes_per_block):
            _accumulate(acc, data, b * block_len + 64 * k, secret, 8 * k)
        for lane in range(8):
            a = acc[lane]
            a ^= a >> 47
            a ^= _r64(secret, size - 64 + 8 * lane)
            acc[lane] = (a * P32_1) & M64
    stripes = ((n - 1) - block_len * blocks) // 64
    for k in range(stripes):
        _accumulate(acc, data, blocks * block_len + 64 * k, secret, 8 * k)
    _accumulate(acc, data, n - 64, secret, size - 64 - 7)
    result = (n * P64_1) & M64
    for i in range(4):
        result += _fold(acc[2 * i] ^ _r64(secret, 11 + 16 * i),
                        acc[2 * i + 1] ^ _r64(secret, 11 + 16 * i + 8))
    return _avalanche(result & M64)


def xxh3_64(data: bytes, seed: int = 0) -> int:
    """XXH3-64 of ``data`` with ``seed``."""
    n = len(data)
    seed &= M64
    if n <= 16:
        return _short(data, n, seed)
    s = SECRET
    if n <= 128:
        acc = (n * P64_1) & M64
        pairs = ((0, 0),)
        if n > 32:
            pairs = ((0, 0), (16, 32)) if n <= 64 else \
                ((0, 0), (16, 32), (32, 64)) if n <= 96 else ((0, 0), (16, 32), (32, 64), (48, 96))
        for i, k in pairs:
            acc += _mix16(data, i, s, k, seed) + _mix16(data, n - i - 16, s, k + 16, seed)
        return _avalanche(acc & M64)
    if n <= 240:
        acc = (n * P64_1) & M64
        for i in range(8):
            acc += _mix16(data, 16 * i, s, 16 * i, seed)
        acc = _avalanche(acc & M64)
        end = _mix16(data, n - 16, s, 136 - 17, seed)
        for i in range(8, n // 16):
            end += _mix16(data, 16 * i, s, 16 * (i - 8) + 3, seed)
        return _avalanche((acc + end) & M64)
    return _long(data, n, seed)


# XXH3-64 (seed 1337) of 16 bytes, the pair (parent, local) as two LE u64: the 9-16 byte path
# with its secret words folded in once
_FLIP1 = ((_r64(SECRET, 24) ^ _r64(SECRET, 32)) + SEED) & M64
_FLIP2 = ((_r64(SECRET, 40) ^ _r64(SECRET, 48)) - SEED) & M64
_PAIRS: dict = {}               # (parent, local) -> sequence hash, shared prefixes hashed once
_PAIRS_MAX = 1 << 20


def pair_hash(parent: int, local: int) -> int:
    """The sequence hash after ``parent`` of a block whose own hash is ``local``."""
    key = (parent, local)
    h = _PAIRS.get(key)
    if h is None:
        lo = parent ^ _FLIP1
        hi = local ^ _FLIP2
        p = lo * hi
        acc = (16 + int.from_bytes(lo.to_bytes(8, "little"), "big") + hi
               + ((p & M64) ^ (p >> 64))) & M64
        acc ^= acc >> 37
        acc = (acc * MX1) & M64
        h = acc ^ (acc >> 32)
        if len(_PAIRS) >= _PAIRS_MAX:
            _PAIRS.clear()
        _PAIRS[key] = h
    return h


_RUNS: dict = {}                # (parent, local, k) -> the k sequence hashes of a run
_RUNS_MAX = 1 << 16


def ref_seq_hashes(prompt, block_size: int, n_blocks: int, backend=None) -> array:
    """The reference's sequence hashes of the first ``n_blocks`` complete blocks of ``prompt``."""
    if resolve_backend(backend) == "c":
        return _c_ref_seq_hashes(prompt, block_size, n_blocks)
    return _py_ref_seq_hashes(prompt, block_size, n_blocks)


def _c_ref_seq_hashes(prompt, block_size, n_blocks):
    values, lengths = prompt.values, prompt.lengths
    out = array("Q", bytes(8 * n_blocks))
    status = lib.aisim_ref_seq_hashes(ffi.from_buffer("uint32_t[]", values),
                                      ffi.from_buffer("uint32_t[]", lengths), len(values),
                                      block_size, ffi.from_buffer("uint64_t[]", out), n_blocks)
    if status < 0:
        detail = None if status != EINVAL else \
            f"a prompt of {prompt.length} tokens has fewer than {n_blocks} blocks of {block_size}"
        raise status_error(status, "ref_seq_hashes", detail)
    return out


def _py_ref_seq_hashes(prompt, block_size: int, n_blocks: int) -> array:
    """``ref_seq_hashes`` in Python (the C function's twin).
    The blocks of one repeated token that a run covers whole share their own hash, so the
    chain over them after a given parent is hashed once and kept (``_RUNS``): prompts that
    share a prefix (a conversation's turns) hash it once."""
    out = array("Q")
    values, lengths = prompt.values, prompt.lengths
    run = used = 0
    parent = None
    cache = {}                        # a block of one repeated token: hashed once per value
    runs = _RUNS
    while len(out) < n_blocks:
        while used == lengths[run]:
            run += 1
            used = 0
        whole = (lengths[run] - used) // block_size
        if whole:
            value = values[run]
            local = cache.get(value)
            if local is None:
                local = cache[value] = xxh3_64(_I.pack(value) * block_size, SEED)
            k = min(whole, n_blocks - len(out))
            key = (parent, local, k)
            chain = runs.get(key)
            if chain is None:
                chain = array("Q")
                h = parent
                for _ in range(k):
                    h = local if h is None else pair_hash(h, local)
                    chain.append(h)
                if len(runs) >= _RUNS_MAX:
                    runs.clear()
                runs[key] = chain
            out.extend(chain)
            parent = chain[-1]
            used += k * block_size
            continue
        tokens = []
        while len(tokens) < block_size:
            take = min(lengths[run] - used, block_size - len(tokens))
            tokens.extend([values[run]] * take)
            used += take
            if used == lengths[run] and len(tokens) < block_size:
                run += 1
                used = 0
        local = xxh3_64(struct.pack(f"<{block_size}I", *tokens), SEED)
        parent = local if parent is None else pair_hash(parent, local)
        out.append(parent)
    return out

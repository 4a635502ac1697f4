"""Sequence hashes of complete KV blocks, chained like the reference's.

``seq_hashes(tokens, block_size, parent=None)`` hashes every complete block of
``block_size`` u32 tokens and chains them: the first block's hash is its own
content hash (or ``pair(parent, content)`` when ``parent`` continues an
existing chain) and every later one is ``pair(previous, content)``. Two
prompts therefore share the hashes of exactly their common complete-block
prefix. ``seq_hashes_runs(values, lengths, block_size, parent=None)`` gives
the same result for a prompt written as runs of repeated tokens, without
expanding it. Both return ``array('Q')``; a trailing partial block is ignored.

The 64-bit hash is our own (csrc/hashing.c explains it); the Python twin below
reproduces the C bits exactly. ``backend="c" | "python"`` forces one.
"""

from array import array

from aisimulate_core.native import EINVAL, ffi, lib, resolve_backend, status_error

_MASK = (1 << 64) - 1
_SEED = 1337
_K0 = 0xA0761D6478BD642F
_K1 = 0xE7037ED1A0B428DB
_K2 = 0x8EBC6AF09C88C6E3
_K3 = 0x589965CC75374CC3
_K4 = 0x1D8E4E27C47D124F
_K5 = 0x9E3779B97F4A7C15
_K6 = 0xC2B2AE3D27D4EB4F
_U32_MAX = (1 << 32) - 1
_ZERO_HASH = array("Q", [0])
# parsed once; these wrappers are called per request
_U32_ARRAY = ffi.typeof("uint32_t[]") if ffi is not None else None
_U64_ARRAY = ffi.typeof("uint64_t[]") if ffi is not None else None


def seq_hashes(tokens, block_size, parent=None, *, backend=None):
    """Chained hashes of the complete ``block_size`` blocks of ``tokens``."""
    tokens = _u32_array(tokens, "seq_hashes", "tokens")
    _check_chain_args("seq_hashes", block_size, parent)
    if resolve_backend(backend) == "c":
        return _c_seq_hashes(tokens, block_size, parent)
    return _py_seq_hashes(tokens, block_size, parent)


def seq_hashes_runs(values, lengths, block_size, parent=None, *, backend=None):
    """``seq_hashes`` of the tokens ``values[i]`` repeated ``lengths[i]`` times, in order."""
    values = _u32_array(values, "seq_hashes_runs", "values")
    lengths = _u32_array(lengths, "seq_hashes_runs", "lengths")
    if len(values) != len(lengths):
        raise status_error(
            EINVAL,
            "seq_hashes_runs",
            f"values and lengths differ in length ({len(values)} != {len(lengths)})",
        )
    _check_chain_args("seq_hashes_runs", block_size, parent)
    if resolve_backend(backend) == "c":
        return _c_seq_hashes_runs(values, lengths, block_size, parent)
    return _py_seq_hashes_runs(values, lengths, block_size, parent)


def _u32_array(values, operation, name):
    if isinstance(values, array) and values.typecode == "I":
        return values
    try:
        return array("I", values)
    except (OverflowError, TypeError) as exc:
        raise status_error(EINVAL, operation, f"{name} must be u32 integers ({exc})") from None


def _check_chain_args(operation, block_size, parent):
    if not 1 <= block_size <= _U32_MAX:
        raise status_error(EINVAL, operation, f"block_size must be in 1..{_U32_MAX}, got {block_size}")
    if parent is not None and not 0 <= parent <= _MASK:
        raise status_error(EINVAL, operation, f"parent must be a u64, got {parent}")


def _empty_hashes(count):
    return _ZERO_HASH * count


# ------------------------------------------------------------------ C backend


def _c_seq_hashes(tokens, block_size, parent):
    inputs = (ffi.from_buffer(_U32_ARRAY, tokens), len(tokens))
    return _c_chain("seq_hashes", lib.aisim_hash_blocks, inputs, len(tokens), block_size, parent)


def _c_seq_hashes_runs(values, lengths, block_size, parent):
    inputs = (ffi.from_buffer(_U32_ARRAY, values), ffi.from_buffer(_U32_ARRAY, lengths),
              len(values))
    return _c_chain("seq_hashes_runs", lib.aisim_hash_block_runs, inputs, sum(lengths),
                    block_size, parent)


def _c_chain(operation, function, inputs, n_tokens, block_size, parent):
    """Call a C hashing function: its token inputs, then the chain and output arguments."""
    out = _empty_hashes(n_tokens // block_size)
    status = function(*inputs, block_size, parent is not None, parent or 0,
                      ffi.from_buffer(_U64_ARRAY, out), len(out))
    if status < 0:
        raise status_error(status, operation)
    return out


# ------------------------------------------------------------ Python backend


def _fold_mul(a, b):
    product = a * b
    return (product & _MASK) ^ (product >> 64)


def _block_hash(tokens, start, n):
    state = _fold_mul(_SEED ^ _K0, n ^ _K1)
    end = start + n
    for i in range(start, end, 4):
        t1 = tokens[i + 1] if i + 1 < end else 0
        t2 = tokens[i + 2] if i + 2 < end else 0
        t3 = tokens[i + 3] if i + 3 < end else 0
        a = tokens[i] | t1 << 32
        b = t2 | t3 << 32
        rotated = ((state << 32) | (state >> 32)) & _MASK
        state = _fold_mul(a ^ state ^ _K1, b ^ rotated ^ _K2)
    return _fold_mul(state ^ _K3, n ^ _K4)


def _pair_hash(parent, local):
    return _fold_mul(_fold_mul(parent ^ _K5, local ^ _K6) ^ _K3, 16 ^ _K4)


def _chain(locals_, parent):
    out = _empty_hashes(len(locals_))
    previous = parent
    for i, local in enumerate(locals_):
        previous = local if previous is None else _pair_hash(previous, local)
        out[i] = previous
    return out


def _py_seq_hashes(tokens, block_size, parent):
    n_blocks = len(tokens) // block_size
    return _chain([_block_hash(tokens, b * block_size, block_size) for b in range(n_blocks)], parent)


def _py_seq_hashes_runs(values, lengths, block_size, parent):
    n_blocks = sum(lengths) // block_size
    locals_ = []
    run, used = 0, 0
    const_value = const_hash = None
    for _ in range(n_blocks):
        while used == lengths[run]:
            run += 1
            used = 0
        if lengths[run] - used >= block_size:
            if values[run] != const_value:
                const_value = values[run]
                const_hash = _block_hash([const_value] * block_size, 0, block_size)
            locals_.append(const_hash)
            used += block_size
            continue
        block = []
        while len(block) < block_size:
            take = min(lengths[run] - used, block_size - len(block))
            block.extend([values[run]] * take)
            used += take
            if used == lengths[run] and len(block) < block_size:
                run += 1
                used = 0
        locals_.append(_block_hash(block, 0, block_size))
    return _chain(locals_, parent)

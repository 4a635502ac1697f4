"""A vLLM rank's run of decode-only passes: the loop behind ``VllmRank.extend``.

After a pass that only decodes open stretches, the passes that follow change nothing but token
counts until a request finishes, the KV pool runs out, or the clock reaches the next known
arrival or the run's time limit. Each such pass costs one decode-time evaluation and a block
count; the C loop (csrc/decode_run.c) does them without Python, evaluating the built-in timing
models itself and asking Python only for a time it does not know (an external provider's
prediction, kept in a memo so each distinct pass shape is asked once). The Python twin below is
the loop itself, used with ``AISIMULATE_BACKEND=python`` and as the parity reference.
"""

from __future__ import annotations

from array import array

from .. import native
from .timing import FixedTiming, PolynomialTiming

MAX_PASSES = 4096            # passes per run: bounds the run's buffer and a truncation's work
MEMO_LIMIT = 1_000_000       # distinct (batch, active) pass times the C memo keeps
_EXACT = 2 ** 62             # integers the C loop takes; larger runs stay in Python


def run_python(decode, *, first_pass, end_ms, batch, base, total_kv, block_size, room,
               horizon_ms, cutoff_ms, crossing, stop_pass, max_passes=MAX_PASSES):
    """End times of the pass just formed (``end_ms``, pass ``first_pass - 1``) and of each
    decode-only pass that follows it. ``crossing`` maps a pass offset (mod ``block_size``) to
    the decoders that need a new block in such a pass; ``stop_pass`` is the first pass in which
    a request emits its last token (-1 for none)."""
    ends = array("d", [end_ms])
    end = end_ms
    for P in range(first_pass, first_pass - 1 + max_passes):
        if end >= horizon_ms:
            break
        need = crossing.get(P % block_size, 0)
        if need > room:
            break
        active = base + batch * P
        nxt = end + decode(batch, active, active // batch, total_kv)
        if nxt > cutoff_ms:
            break
        room -= need
        end = nxt
        ends.append(end)
        if P == stop_pass:
            break
    return ends


def answer_misses(status, run, timing, decode, total_kv, resume):
    """Keep a C decode loop going while it stops for a time only Python knows (an external
    provider's prediction, or an error only it can word): each asked (batch, active) time is
    computed by ``decode``, put in the memo ``timing``, and ``resume()`` calls the loop again.
    Returns the loop's last status."""
    lib = native.lib
    while status == lib.AISIM_DECODE_MISS:
        batch, active = run.miss_batch, run.miss_active
        value = decode(batch, active, active // batch, total_kv)
        native.check_status(lib.aisim_decode_timing_put(timing, batch, active, value),
                            "aisim_decode_timing_put")
        status = resume()
    return status


def _native_kind(model):
    """(kind, fixed ms) for a built-in model C evaluates itself; an exact type test, since a
    subclass may change the formula."""
    lib = native.lib
    if type(model) is FixedTiming:
        return lib.AISIM_DECODE_FIXED, model.decode
    if type(model) is PolynomialTiming:
        return lib.AISIM_DECODE_POLYNOMIAL, 0.0
    return lib.AISIM_DECODE_MEMO, 0.0


class CDecodeRun:
    """One rank's C loop: its timing handle (with the memo) and reusable buffers."""

    __slots__ = ("_decode", "_total_kv", "_timing", "_run", "_ends", "_keys", "_counts",
                 "_key_cap")

    def __init__(self, timer, total_kv):
        ffi, lib = native.ffi, native.lib
        self._decode = timer.decode
        self._total_kv = total_kv
        kind, fixed_ms = _native_kind(timer.model)
        self._timing = native.open_handle(
            "aisim_decode_timing", lib.aisim_decode_timing_new, lib.aisim_decode_timing_free,
            "aisim_decode_timing_new", kind, fixed_ms, timer.decode_ratio, total_kv, MEMO_LIMIT)
        self._run = ffi.new("aisim_decode_run *")
        self._ends = ffi.new("double[]", MAX_PASSES)
        self._key_cap = 16
        self._keys = ffi.new("int64_t[]", 16)
        self._counts = ffi.new("int64_t[]", 16)

    def __call__(self, *, first_pass, end_ms, batch, base, total_kv, block_size, room,
                 horizon_ms, cutoff_ms, crossing, stop_pass, max_passes=MAX_PASSES):
        last = first_pass - 1 + max_passes
        if (total_kv != self._total_kv or not -_EXACT < base < _EXACT
                or batch * last >= _EXACT or room >= _EXACT or max_passes > MAX_PASSES):
            return run_python(self._decode, first_pass=first_pass, end_ms=end_ms, batch=batch,
                              base=base, total_kv=total_kv, block_size=block_size, room=room,
                              horizon_ms=horizon_ms, cutoff_ms=cutoff_ms, crossing=crossing,
                              stop_pass=stop_pass, max_passes=max_passes)
        ffi, lib = native.ffi, native.lib
        run = self._run
        n = len(crossing)
        if n > self._key_cap:
            self._key_cap = max(n, 2 * self._key_cap)
            self._keys = ffi.new("int64_t[]", self._key_cap)
            self._counts = ffi.new("int64_t[]", self._key_cap)
        keys, counts = self._keys, self._counts
        for i, key in enumerate(sorted(crossing)):
            keys[i] = key
            counts[i] = crossing[key]
        run.block_size = block_size
        run.batch = batch
        run.base = base
        run.stop_pass = stop_pass
        run.last_pass = last
        run.horizon_ms = horizon_ms
        run.cutoff_ms = cutoff_ms
        run.crossing_keys = keys
        run.crossing_counts = counts
        run.n_crossing = n
        run.pass_ = first_pass
        run.room = room
        run.end_ms = end_ms
        ends = self._ends
        ends[0] = end_ms
        run.n_ends = 1
        timing = self._timing
        status = lib.aisim_decode_extend(timing, run, ends, max_passes)
        if status == lib.AISIM_DECODE_MISS:
            status = answer_misses(status, run, timing, self._decode, total_kv,
                                   lambda: lib.aisim_decode_extend(timing, run, ends, max_passes))
        native.check_status(status, "aisim_decode_extend")
        return native.c_array("d", ends, run.n_ends)


def decode_runner(timer, total_kv, backend=None):
    """The decode-run loop for one rank: a callable taking ``run_python``'s keywords."""
    if native.resolve_backend(backend) == "c" and -_EXACT < total_kv < _EXACT:
        return CDecodeRun(timer, total_kv)
    decode = timer.decode

    def run(**kwargs):
        return run_python(decode, **kwargs)
    return run

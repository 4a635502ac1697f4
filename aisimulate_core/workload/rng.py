"""Rust's ``rand::rngs::StdRng::seed_from_u64`` reproduced bit for bit.

The reference (AISimulate, rand 0.9.x) draws synthetic arrivals and choices
from StdRng = ChaCha12 seeded through rand_core's PCG32 expansion of a u64.
Everything it draws is a prefix of one ChaCha12 keystream of u32 words:
``next_u32`` takes one word and ``next_u64`` two (low word first), whatever
the block boundaries. The C backend draws in csrc/rng.c (single draws are
read back from a view struct, arrival schedules come in one call); the
Python twin keeps a 64-word buffer of its own keystream.

Distributions match rand 0.9: ``next_f64`` is ``(u64 >> 11) * 2**-53``
(StandardUniform); ``gen_range`` is ``random_range(low..high)`` for usize
(values below 2**32 are drawn as u32, Canon's method: one widening multiply
and a second draw only when the low half lands in the top ``range`` values);
``gen_range_u32`` / ``gen_range_u64`` are the same for those types;
``gen_bool`` is ``random_bool`` (Bernoulli: ``u64 < p * 2**64``, no draw when
``p == 1``), which the reference's MTP sampler uses (``accepted_tokens``).

Checked against the reference wheel: ``poisson_arrivals`` gives the exact
arrival times of its ``PoissonQps`` synthetic traffic for any
``arrival_seed``, and ``gen_range`` its prefix-group choices.
"""

import math

from aisimulate_core.native import EINVAL, ffi, lib, resolve_backend, status_error

_WORDS = 64
_U32 = 0xFFFFFFFF
_U64 = (1 << 64) - 1
_F64_SCALE = 1.0 / (1 << 53)
_MIN_POSITIVE = 2.2250738585072014e-308  # f64::MIN_POSITIVE
_MAX_MEAN_GAP_MS = 1.7976931348623157e308 / 1024.0


class StdRng:
    """``StdRng(seed)`` = ``StdRng::seed_from_u64(seed)``; ``backend=`` forces C or Python."""

    __slots__ = ()
    backend = None

    def __new__(cls, seed=0, backend=None):
        if cls is StdRng:
            cls = CStdRng if resolve_backend(backend) == "c" else PyStdRng
        return object.__new__(cls)

    def __init__(self, seed=0, backend=None):
        if not 0 <= seed <= _U64:
            raise status_error(EINVAL, "StdRng", f"seed must be a u64, got {seed}")
        self._seed(seed)

    @classmethod
    def from_seed(cls, seed32, rounds=12, backend=None):
        """``ChaChaRng::from_seed`` with a raw 32-byte key (rounds 12 = StdRng, 20 = ChaCha20)."""
        seed32 = bytes(seed32)
        if len(seed32) != 32 or rounds <= 0 or rounds % 2:
            raise status_error(EINVAL, "StdRng.from_seed", "needs 32 seed bytes and even rounds")
        rng = cls.__new__(cls, 0, backend)
        rng._seed_key(seed32, rounds)
        return rng

    def gen_range(self, low, high):
        """``rng.random_range(low..high)`` for ``usize`` on a 64-bit target."""
        _check_range("gen_range", low, high, _U64)
        if high > _U32:
            return self._range_u64(low, high)
        return self._range_u32(low, high)

    def gen_range_u32(self, low, high):
        _check_range("gen_range_u32", low, high, _U32)
        return self._range_u32(low, high)

    def gen_range_u64(self, low, high):
        _check_range("gen_range_u64", low, high, _U64)
        return self._range_u64(low, high)

    def gen_bool(self, p):
        """``rng.random_bool(p)`` (rand 0.9 Bernoulli): one u64 unless ``p == 1``."""
        if not 0.0 <= p <= 1.0:
            raise status_error(EINVAL, "gen_bool", f"p must be in [0, 1], got {p}")
        if p == 1.0:
            return True  # no draw at all, while p == 0 still consumes one
        return self.next_u64() < int(p * 18446744073709551616.0)

    def accepted_tokens(self, conditional_accept_rates):
        """The reference's MTP burst: 1 + the draft tokens accepted before the first rejection."""
        tokens = 1
        for rate in conditional_accept_rates:
            if not self.gen_bool(rate):
                break
            tokens += 1
        return tokens

    def exponential_ms(self, mean_ms):
        """One exponential sample as the reference draws it (no draw when the mean is 0)."""
        _check_mean("exponential_ms", mean_ms)
        return self._exponential(mean_ms)

    def poisson_arrivals(self, n, mean_gap_ms):
        """Cumulative PoissonQps arrival times: 0.0 first (no draw), then exponential gaps."""
        if n < 0:
            raise status_error(EINVAL, "poisson_arrivals", f"n must be >= 0, got {n}")
        _check_mean("poisson_arrivals", mean_gap_ms)
        return self._poisson(n, mean_gap_ms)

    def arrivals_after(self, now_ms, n, mean_gap_ms):
        """``n`` more arrival times after ``now_ms``: each adds one exponential gap (drawn as
        ``exponential_ms`` draws it) to the one before, so a schedule drawn in chunks is the
        schedule ``poisson_arrivals`` gives drawn at once."""
        if n < 0:
            raise status_error(EINVAL, "arrivals_after", f"n must be >= 0, got {n}")
        _check_mean("arrivals_after", mean_gap_ms)
        return self._arrivals_after(float(now_ms), n, mean_gap_ms)

    def sample_length(self, mean, stddev, min_value=1):
        """The reference's LengthSpec sample: Box-Muller, rounded half away from zero."""
        if stddev == 0.0:
            return max(mean, min_value)
        u1 = min(max(1.0 - self.next_f64(), _MIN_POSITIVE), 1.0)
        u2 = self.next_f64()
        z0 = math.sqrt(-2.0 * math.log(u1)) * math.cos(math.tau * u2)
        sample = mean + z0 * abs(stddev)
        return int(max(_round_half_away(sample), float(min_value)))


class CStdRng(StdRng):
    """Draws in csrc/rng.c; a single draw is a one-argument call plus a view read."""

    __slots__ = ("_rng", "_view")
    backend = "c"

    def _new_handle(self):
        box = ffi.new("aisim_rng **")
        status = lib.aisim_rng_new(box)
        if status:
            raise status_error(status, "StdRng")
        self._rng = ffi.gc(box[0], lib.aisim_rng_free)
        view = ffi.new("aisim_rng_view **")
        lib.aisim_rng_view_of(self._rng, view)
        self._view = view[0]

    def _seed(self, seed):
        self._new_handle()
        lib.aisim_rng_seed_u64(self._rng, seed)

    def _seed_key(self, seed32, rounds):
        self._new_handle()
        lib.aisim_rng_seed_bytes(self._rng, seed32, rounds)

    def next_u32(self):
        lib.aisim_rng_next_u32(self._rng)
        return self._view.last_u32

    def next_u64(self):
        lib.aisim_rng_next_u64(self._rng)
        return self._view.last_u64

    def next_f64(self):
        lib.aisim_rng_next_f64(self._rng)
        return self._view.last_f64

    def _range_u32(self, low, high):
        lib.aisim_rng_range_u32(self._rng, low, high)
        return self._view.last_u32

    def _range_u64(self, low, high):
        lib.aisim_rng_range_u64(self._rng, low, high)
        return self._view.last_u64

    def _exponential(self, mean_ms):
        lib.aisim_rng_exponential(self._rng, mean_ms)
        return self._view.last_f64

    def _poisson(self, n, mean_gap_ms):
        out = ffi.new("double[]", n)
        status = lib.aisim_rng_poisson_arrivals(self._rng, n, mean_gap_ms, out)
        if status:
            raise status_error(status, "StdRng.poisson_arrivals")
        return ffi.unpack(out, n)

    def _arrivals_after(self, now_ms, n, mean_gap_ms):
        out = ffi.new("double[]", n)
        status = lib.aisim_rng_arrivals_after(self._rng, n, mean_gap_ms, now_ms, out)
        if status:
            raise status_error(status, "StdRng.arrivals_after")
        return ffi.unpack(out, n)


class PyStdRng(StdRng):
    """The keystream computed in Python (about a microsecond per word)."""

    __slots__ = ("_key", "_counter", "_rounds", "_words", "_pos")
    backend = "python"

    def _seed(self, seed):
        self._seed_key(b"".join(w.to_bytes(4, "little") for w in _pcg32_key(seed)), 12)

    def _seed_key(self, seed32, rounds):
        self._key = [int.from_bytes(seed32[i : i + 4], "little") for i in range(0, 32, 4)]
        self._counter = 0
        self._rounds = rounds
        self._pos = _WORDS

    def _refill(self):
        words = []
        for offset in range(_WORDS // 16):
            words.extend(_chacha_block(self._key, self._counter + offset, self._rounds))
        self._counter += _WORDS // 16
        self._words = words
        self._pos = 0

    def next_u32(self):
        if self._pos == _WORDS:
            self._refill()
        pos = self._pos
        self._pos = pos + 1
        return self._words[pos]

    def next_u64(self):
        pos = self._pos
        if pos < _WORDS - 1:
            self._pos = pos + 2
            words = self._words
            return words[pos] | words[pos + 1] << 32
        low = self.next_u32()  # the high word comes from the next buffer
        return low | self.next_u32() << 32

    def next_f64(self):
        return (self.next_u64() >> 11) * _F64_SCALE

    def _range_u32(self, low, high):
        return _canon(low, high, self.next_u32, 32)

    def _range_u64(self, low, high):
        return _canon(low, high, self.next_u64, 64)

    def _exponential(self, mean_ms):
        if mean_ms == 0.0:
            return 0.0
        u = min(max(1.0 - self.next_f64(), _MIN_POSITIVE), 1.0)
        return -mean_ms * math.log(u)

    def _arrivals_after(self, now_ms, n, mean_gap_ms):
        arrivals = [0.0] * n
        for i in range(n):
            now_ms += self._exponential(mean_gap_ms)
            arrivals[i] = now_ms
        return arrivals

    def _poisson(self, n, mean_gap_ms):
        arrivals = [0.0] * n
        now_ms = 0.0
        for i in range(1, n):
            now_ms += self._exponential(mean_gap_ms)
            arrivals[i] = now_ms
        return arrivals


def _canon(low, high, draw, bits):
    # rand 0.9 sample_single (Canon's method, biased variant = the default):
    # one widening multiply; a second draw only when the low half lands in
    # the top `span` values, and it can only carry one into the result.
    span = high - low
    mask = (1 << bits) - 1
    product = draw() * span
    result, low_half = product >> bits, product & mask
    if low_half > (-span & mask):
        carry_in = (draw() * span) >> bits
        if low_half + carry_in > mask:
            result += 1
    return low + result


def _pcg32_key(seed):
    # rand_core's seed_from_u64: advance the PCG state, then output from it
    key = []
    state = seed
    for _ in range(8):
        state = (state * 6364136223846793005 + 11634580027462260723) & _U64
        xorshifted = (((state >> 18) ^ state) >> 27) & _U32
        rot = state >> 59
        key.append(((xorshifted >> rot) | (xorshifted << ((32 - rot) & 31))) & _U32)
    return key


def _quarter_round(a, b, c, d):
    a = (a + b) & _U32
    d ^= a
    d = ((d << 16) | (d >> 16)) & _U32
    c = (c + d) & _U32
    b ^= c
    b = ((b << 12) | (b >> 20)) & _U32
    a = (a + b) & _U32
    d ^= a
    d = ((d << 8) | (d >> 24)) & _U32
    c = (c + d) & _U32
    b ^= c
    b = ((b << 7) | (b >> 25)) & _U32
    return a, b, c, d


def _chacha_block(key, counter, rounds):
    # sixteen locals rather than a list: the keystream is the twin's whole cost
    init = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574, *key,
            counter & _U32, (counter >> 32) & _U32, 0, 0)  # fmt: skip
    x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15 = init
    q = _quarter_round
    for _ in range(rounds // 2):
        x0, x4, x8, x12 = q(x0, x4, x8, x12)
        x1, x5, x9, x13 = q(x1, x5, x9, x13)
        x2, x6, x10, x14 = q(x2, x6, x10, x14)
        x3, x7, x11, x15 = q(x3, x7, x11, x15)
        x0, x5, x10, x15 = q(x0, x5, x10, x15)
        x1, x6, x11, x12 = q(x1, x6, x11, x12)
        x2, x7, x8, x13 = q(x2, x7, x8, x13)
        x3, x4, x9, x14 = q(x3, x4, x9, x14)
    mixed = (x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15)
    return [(x + y) & _U32 for x, y in zip(mixed, init)]


def _check_mean(operation, mean_ms):
    if not 0.0 <= mean_ms <= _MAX_MEAN_GAP_MS:
        raise status_error(EINVAL, operation, f"needs a finite mean >= 0, got {mean_ms}")


def _check_range(operation, low, high, limit):
    if not 0 <= low < high <= limit:
        raise status_error(EINVAL, operation, f"needs 0 <= low < high <= {limit}, got {low}..{high}")


def _round_half_away(x):
    # Rust's f64::round; Python's round() would round half to even
    magnitude = abs(x)
    whole = math.floor(magnitude)
    if magnitude - whole >= 0.5:
        whole += 1
    return math.copysign(whole, x)

"""Built-in timing models (SEMANTICS 2.2) and the wrapper every engine calls.

A timing *provider* is a class with a ``NAME`` and ``from_config(config, context)`` returning a
timing *model*: an object with ``prefill_ms(batch_size, mean_isl, mean_prefix)`` and
``decode_ms(batch_size, active_kv_tokens, mean_context_length, total_kv_tokens)``.
"""

from __future__ import annotations

import math
from fractions import Fraction

from ..errors import ConfigError, SimulationError


class TimingContext:
    """What a provider may know about the role it builds a model for."""

    __slots__ = ("role", "path", "engine", "replay_engine")

    def __init__(self, role, path, engine, replay_engine=None):
        self.role = role                  # "aggregated" | "prefill" | "decode"
        self.path = path                  # JSON path of the timing_model object, for errors
        self.engine = engine              # the role's EngineConfig (rank)
        self.replay_engine = replay_engine  # the role's ReplayRoleConfig (dp_size, tp, ...)


def _number(config, key, path, *, default=None):
    value = config.get(key, default)
    if value is None:
        raise ConfigError(f"{path}.{key}: required")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{path}.{key}: must be a finite number, got {value!r}")
    if value < 0:
        raise ConfigError(f"{path}.{key}: must be >= 0, got {value!r}")
    return float(value)


def _reject_unknown(config, allowed, path):
    for key in config:
        if key not in allowed:
            raise ConfigError(f"{path}.{key}: unknown field")


class FixedTiming:
    """Constant cost for any non-empty batch: parity and lifecycle tests use it."""

    NAME = "fixed"
    __slots__ = ("prefill", "decode")

    def __init__(self, prefill_ms: float, decode_ms: float):
        self.prefill = prefill_ms
        self.decode = decode_ms

    @classmethod
    def from_config(cls, config, context):
        _reject_unknown(config, ("type", "prefill_ms", "decode_ms"), context.path)
        return cls(_number(config, "prefill_ms", context.path),
                   _number(config, "decode_ms", context.path))

    def prefill_ms(self, batch_size, mean_isl, mean_prefix):
        return self.prefill if batch_size > 0 else 0.0

    def decode_ms(self, batch_size, active_kv_tokens, mean_context_length, total_kv_tokens):
        return self.decode if batch_size > 0 else 0.0


class PolynomialTiming:
    """The reference's default fit: prefill is quadratic in new tokens, decode depends on KV use."""

    NAME = "polynomial"
    __slots__ = ()

    @classmethod
    def from_config(cls, config, context):
        _reject_unknown(config, ("type",), context.path)
        return cls()

    def prefill_ms(self, batch_size, mean_isl, mean_prefix):
        new_tokens = batch_size * (mean_isl - mean_prefix)
        if batch_size <= 0 or new_tokens <= 0:
            return 0.0
        t = float(new_tokens)
        return 4.209989e-7 * (t * t) + 1.518344e-2 * t + 16.50142

    def decode_ms(self, batch_size, active_kv_tokens, mean_context_length, total_kv_tokens):
        if batch_size <= 0:
            return 0.0
        p = 1.0 if total_kv_tokens <= 0 else min(active_kv_tokens / total_kv_tokens, 1.0)
        return max(-25.74 * (p * p) + 54.01 * p + 5.74, 1.0)


# Rust's Duration holds at most 2^64 s: from_secs_f64 refuses anything at or above it (in ns)
_MAX_NANOS_F64 = float(2**64 * 10**9)


class DurationRangeError(ValueError):
    """A modeled time the reference's ``Duration`` cannot hold (too big, or NaN)."""


def _nanos(seconds):
    """Rust's ``Duration::from_secs_f64``: nearest whole nanosecond of the exact binary value."""
    scaled = seconds * 1e9
    if not scaled < _MAX_NANOS_F64:
        raise DurationRangeError(seconds)
    whole = math.floor(scaled)
    frac = scaled - whole
    if abs(frac - 0.5) > 1e-4:
        return whole + (1 if frac > 0.5 else 0)
    exact = Fraction(seconds) * 1_000_000_000
    whole = math.floor(exact)
    return whole + (1 if exact - whole >= Fraction(1, 2) else 0)


def _secs(nanos):
    """Rust's ``Duration::as_secs_f64``."""
    return (nanos // 1_000_000_000) + (nanos % 1_000_000_000) / 1e9


def modeled_ms(raw_ms, ratio):
    """A raw model time scaled by a speedup ratio, in whole nanoseconds as the reference keeps it.

    A ratio of 0 means unscaled.
    """
    d = _nanos(raw_ms / 1000.0)
    if ratio > 0 and ratio != 1.0 and d > 0:
        d = _nanos(_secs(d) / ratio)
    return _secs(d) * 1000.0


class StepTimer:
    """Engine-facing wrapper: memoizes exact arguments, applies speedups, rejects bad values.

    Providers may be slow (AIC interpolates tables), while a replay asks the same coordinates
    many times, so every distinct argument tuple is evaluated once.
    """

    __slots__ = ("model", "prefill_ratio", "decode_ratio", "_prefill_memo", "decode_memo", "name")

    def __init__(self, model, *, speedup_ratio=1.0, decode_speedup_ratio=1.0, name="timing"):
        self.model = model
        self.name = name
        self.prefill_ratio = speedup_ratio
        self.decode_ratio = speedup_ratio * decode_speedup_ratio
        self._prefill_memo = {}
        self.decode_memo = {}

    def _modeled(self, phase, raw_ms, ratio):
        try:
            return modeled_ms(raw_ms, ratio)
        except DurationRangeError:
            scaled = ""
            if ratio > 0 and ratio != 1.0:
                scaled = f" at speedup {ratio!r} (speedup_ratio x decode_speedup_ratio for decode)" \
                    if phase == "decode" else f" at speedup_ratio {ratio!r}"
            raise SimulationError(
                f"{self.name}: {phase} time {raw_ms!r} ms{scaled} is out of range: a pass "
                f"lasts less than 2^64 s") from None

    def prefill(self, batch_size, mean_isl, mean_prefix):
        """Modeled prefill time; 0 when nothing new is computed (fully cached prompt)."""
        if batch_size <= 0 or mean_isl <= mean_prefix:
            return 0.0
        key = (batch_size, mean_isl, mean_prefix)
        value = self._prefill_memo.get(key)
        if value is None:
            raw = self.model.prefill_ms(batch_size, mean_isl, mean_prefix)
            if raw is None or not math.isfinite(raw):
                raise SimulationError(f"{self.name}: prefill time is not finite for {key}: {raw!r}")
            value = self._modeled("prefill", max(float(raw), 0.0), self.prefill_ratio)
            self._prefill_memo[key] = value
        return value

    def decode(self, batch_size, active_kv_tokens, mean_context_length, total_kv_tokens):
        if batch_size <= 0:
            return 0.0
        key = (batch_size, active_kv_tokens, mean_context_length, total_kv_tokens)
        value = self.decode_memo.get(key)
        if value is None:
            raw = self.model.decode_ms(batch_size, active_kv_tokens, mean_context_length,
                                       total_kv_tokens)
            if raw is None or not math.isfinite(raw):
                raise SimulationError(f"{self.name}: decode time is not finite for {key}: {raw!r}")
            if raw < 0:
                raise SimulationError(f"{self.name}: decode time is negative for {key}: {raw!r}")
            value = self._modeled("decode", float(raw), self.decode_ratio)
            if len(self.decode_memo) < 1_000_000:
                self.decode_memo[key] = value
        return value

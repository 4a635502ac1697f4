"""The ``aic`` provider's JSON config: the original runtime's fields, aliases and rules.

Every problem is reported with the JSON path of the field and the rule it breaks; all problems
of one stage (field types, then cross-field rules, then agreement with the engine) are reported
together, one per line.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import attrs

from aisimulate_core.errors import ConfigError

from .aic_calls import quant_mode_names

BACKENDS = ("vllm", "sglang", "trtllm")
U32_MAX = 0xFFFF_FFFF
MAX_NEXTN = 5

# alias -> canonical field, as the original runtime accepts them
ALIASES = {
    "tp_size": "tp",
    "gemm_quant_mode": "gemm_dtype",
    "moe_quant_mode": "moe_dtype",
    "fmha_quant_mode": "fmha_dtype",
    "kvcache_quant_mode": "kv_cache_dtype",
    "comm_quant_mode": "comm_dtype",
}
DTYPE_FIELDS = ("gemm_dtype", "moe_dtype", "fmha_dtype", "kv_cache_dtype", "comm_dtype")
MEMORY_FRACTION_FIELDS = ("gpu_memory_utilization", "mem_fraction_static", "free_gpu_memory_fraction")

# The fraction each backend reads, and what it is a fraction of, with the runtime's defaults.
MEMORY_FRACTION_RULES = {
    "vllm": ("gpu_memory_utilization", "of_total", 0.9),
    "sglang": ("mem_fraction_static", "of_total", 0.88),
    "trtllm": ("free_gpu_memory_fraction", "of_free", 0.9),
}


@attrs.frozen(kw_only=True)
class AicConfig:
    model: str
    backend: str
    system: str
    tp: int
    backend_version: str | None = None
    pp: int = 1
    attention_dp: int = 1
    moe_tp_size: int | None = None
    moe_ep_size: int | None = None
    gemm_dtype: str | None = None
    moe_dtype: str | None = None
    fmha_dtype: str | None = None
    kv_cache_dtype: str | None = None
    comm_dtype: str | None = None
    nextn: int = 0
    kv_block_size: int | None = None
    gpu_memory_utilization: float | None = None
    mem_fraction_static: float | None = None
    free_gpu_memory_fraction: float | None = None
    systems_path: str | None = None
    # canonical field -> the key the payload used (an alias or the field itself), for messages
    written: dict = attrs.field(factory=dict, eq=False, repr=False)

    def key(self, field: str) -> str:
        return self.written.get(field, field)

    def memory_fraction(self) -> tuple[str, float]:
        """``(memory_fraction_kind, value)`` for the KV estimate of this backend."""
        field, kind, default = MEMORY_FRACTION_RULES[self.backend]
        value = getattr(self, field)
        return kind, float(default if value is None else value)


REQUIRED = ("model", "backend", "system", "tp")


def show(value: Any) -> str:
    """The value as it appears in JSON."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_string(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, got {show(value)}"
    if not value.strip():
        return f"must not be empty, got {show(value)}"
    return None


def _check_positive_int(value: Any) -> str | None:
    if not _is_int(value) or value <= 0:
        return f"must be a positive integer, got {show(value)}"
    if value > U32_MAX:
        return f"must be at most {U32_MAX}, got {value}"
    return None


def _check_nextn(value: Any) -> str | None:
    if not _is_int(value) or not 0 <= value <= MAX_NEXTN:
        return f"must be an integer in 0..={MAX_NEXTN}, got {show(value)}"
    return None


def _check_backend(value: Any) -> str | None:
    if not isinstance(value, str) or value not in BACKENDS:
        return f"must be one of {', '.join(repr(b) for b in BACKENDS)}, got {show(value)}"
    return None


def _check_fraction(value: Any) -> str | None:
    if (_is_int(value) or isinstance(value, float)) and math.isfinite(value) and 0 <= value <= 1:
        return None
    return f"must be a finite number in [0, 1], got {show(value)}"


def _check_dtype(field: str):
    def check(value: Any) -> str | None:
        names = quant_mode_names(field)
        if not isinstance(value, str) or value not in names:
            return f"must be one of {', '.join(repr(n) for n in names)}, got {show(value)}"
        return None
    return check


def _check_systems_path(value: Any) -> str | None:
    problem = _check_string(value)
    if problem is None and not os.path.isdir(value):
        problem = f"must be a directory holding aiconfigurator-core system files, got {show(value)}"
    return problem


CHECKS = {
    "model": _check_string,
    "backend": _check_backend,
    "system": _check_string,
    "tp": _check_positive_int,
    "backend_version": _check_string,
    "pp": _check_positive_int,
    "attention_dp": _check_positive_int,
    "moe_tp_size": _check_positive_int,
    "moe_ep_size": _check_positive_int,
    "nextn": _check_nextn,
    "kv_block_size": _check_positive_int,
    "systems_path": _check_systems_path,
    **{field: _check_dtype(field) for field in DTYPE_FIELDS},
    **{field: _check_fraction for field in MEMORY_FRACTION_FIELDS},
}
# Fields whose null means "not set", as an optional field of the original runtime.
NULLABLE = frozenset(field.name for field in attrs.fields(AicConfig)
                     if field.name not in REQUIRED and field.default is None)


def _raise(problems: list[str]) -> None:
    if problems:
        raise ConfigError("\n".join(problems))


def parse_config(raw: Any, path: str) -> AicConfig:
    """Validate the provider config object at ``path``; unknown fields are errors."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: must be an object, got {show(raw)}")
    problems: list[str] = []
    values: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in raw.items():
        field = ALIASES.get(key, key)
        if field not in CHECKS:
            problems.append(f"{path}.{key}: unknown field")
            continue
        if field in given_as:
            first, second = sorted((given_as[field], key), key=lambda name: name != field)
            problems.append(f"{path}.{second}: is an alias of {first}; give only one of them")
            continue
        given_as[field] = key
        if value is None and field in NULLABLE:
            continue
        problem = CHECKS[field](value)
        if problem:
            problems.append(f"{path}.{key}: {problem}")
        else:
            values[field] = value
    for field in REQUIRED:
        if field not in given_as:
            problems.append(f"{path}.{field}: is required")
    _raise(problems)

    config = AicConfig(**values, written=given_as)
    _raise(_cross_field_problems(config, path))
    return config


def _cross_field_problems(config: AicConfig, path: str) -> list[str]:
    problems = []
    moe_tp, moe_ep = config.moe_tp_size, config.moe_ep_size
    if (moe_tp is None) != (moe_ep is None):
        missing, present = ("moe_ep_size", "moe_tp_size") if moe_ep is None else ("moe_tp_size", "moe_ep_size")
        problems.append(f"{path}.{missing}: is required with {present} (they are set together)")
    elif moe_tp is not None and config.tp * config.attention_dp != moe_tp * moe_ep:
        problems.append(
            f"{path}: {config.key('tp')} * attention_dp must equal moe_tp_size * moe_ep_size, "
            f"got {config.tp} * {config.attention_dp} != {moe_tp} * {moe_ep}")
    return problems


def check_engine_agreement(config: AicConfig, context, path: str) -> None:
    """The config describes the engine it times: each disagreement is its own problem."""
    rank = context.engine
    role = context.replay_engine
    problems = []

    def disagree(field: str, engine_field: str, engine_value: Any, value: Any) -> None:
        problems.append(f"{path}.{config.key(field)}: must match the engine's {engine_field} "
                        f"{show(engine_value)}, got {show(value)}")

    if config.backend != rank.backend:
        disagree("backend", "backend", rank.backend, config.backend)
    if role is not None and config.tp != role.tensor_parallel_size:
        disagree("tp", "tensor_parallel_size", role.tensor_parallel_size, config.tp)
    if role is not None and config.attention_dp != role.dp_size:
        disagree("attention_dp", "dp_size", role.dp_size, config.attention_dp)
    if config.kv_block_size is not None and config.kv_block_size != rank.block_size:
        disagree("kv_block_size", "block_size", rank.block_size, config.kv_block_size)
    engine_nextn = rank.aic_nextn or 0
    if config.nextn != engine_nextn:
        disagree("nextn", "aic_nextn", engine_nextn, config.nextn)
    _raise(problems)

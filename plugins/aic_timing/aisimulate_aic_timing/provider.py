"""Timing provider ``aic``: step times and KV capacity from aiconfigurator-core.

Selected in a role's rank as ``{"type": "external", "provider": "aic", "config": {...}}``.
"""

from __future__ import annotations

import functools

from aisimulate_core.errors import ConfigError, SimulationError

from . import aic_calls
from .config import U32_MAX, AicConfig, check_engine_agreement, parse_config
from .versions import ResolvedVersion, resolve_backend_version

# Each distinct prediction is computed once. b1 with AIC timing (20,000 requests) visits about
# 1,400 prefill and 2,500 decode points; the bound only stops a pathological replay from
# growing a cache that outlives the run.
MEMO_LIMIT = 1 << 18


class AicTimingModel:
    """Predictions of one compiled engine, memoized on their exact arguments.

    Prefill is one forward of ``batch_size`` prompts of ``mean_isl`` tokens whose first
    ``mean_prefix`` are cached; decode is one step (``osl`` 2) of ``batch_size`` sequences with
    ``mean_context_length`` tokens of KV each. The KV-occupancy arguments are not AIC inputs.
    """

    def __init__(self, engine, config: AicConfig, version: ResolvedVersion):
        self.engine = engine
        self.config = config
        self.version = version
        self._prefill_memo: dict[tuple[int, int, int], float] = {}
        self._decode_memo: dict[tuple[int, int], float] = {}

    def prefill_ms(self, batch_size, mean_isl, mean_prefix):
        if batch_size <= 0 or mean_isl <= mean_prefix:
            return 0.0  # nothing new is computed: no forward pass
        key = (batch_size, mean_isl, mean_prefix)
        value = self._prefill_memo.get(key)
        if value is None:
            _check_u32("prefill batch size", batch_size)
            _check_u32("mean input length", mean_isl)
            _check_u32("mean prefix length", mean_prefix)
            try:
                value = self.engine.predict_prefill_latency(batch_size, mean_isl, mean_prefix)
            except Exception as error:
                raise SimulationError(
                    f"timing 'aic': prefill prediction failed for batch_size={batch_size}, "
                    f"mean_isl={mean_isl}, mean_prefix={mean_prefix}: {error}") from error
            _remember(self._prefill_memo, key, value)
        return value

    def decode_ms(self, batch_size, active_kv_tokens, mean_context_length, total_kv_tokens):
        if batch_size <= 0:
            return 0.0
        key = (batch_size, mean_context_length)
        value = self._decode_memo.get(key)
        if value is None:
            _check_u32("decode batch size", batch_size)
            _check_u32("mean context length", mean_context_length)
            try:
                value = self.engine.predict_decode_latency(batch_size, mean_context_length, 2)
            except Exception as error:
                raise SimulationError(
                    f"timing 'aic': decode prediction failed for batch_size={batch_size}, "
                    f"mean_context_length={mean_context_length}: {error}") from error
            _remember(self._decode_memo, key, value)
        return value

    def report_extras(self):
        return {"aic_backend_version": self.version.version,
                "aic_backend_version_source": self.version.source}


def _check_u32(name, value):
    if value > U32_MAX:
        raise SimulationError(f"timing 'aic': {name} {value} exceeds AIC's u32 limit ({U32_MAX})")


def _remember(memo, key, value):
    if len(memo) < MEMO_LIMIT:
        memo[key] = value


def _compile_options(config: AicConfig) -> tuple:
    """``compile_engine``'s keyword arguments, as the original runtime passes them."""
    return tuple(sorted({
        "tp_size": config.tp, "pp_size": config.pp, "attention_dp_size": config.attention_dp,
        "moe_tp_size": config.moe_tp_size, "moe_ep_size": config.moe_ep_size,
        "gemm_quant_mode": config.gemm_dtype, "moe_quant_mode": config.moe_dtype,
        "fmha_quant_mode": config.fmha_dtype, "kvcache_quant_mode": config.kv_cache_dtype,
        "comm_quant_mode": config.comm_dtype, "nextn": config.nextn,
        "kv_block_size": config.kv_block_size, "systems_path": config.systems_path,
    }.items()))


def _capacity_options(config: AicConfig, rank) -> tuple:
    """``estimate_num_gpu_blocks``'s keyword arguments. Without ``nextn``, as the original
    runtime does: AIC's speculative-decoding memory model can give negative capacity."""
    kind, fraction = config.memory_fraction()
    return tuple(sorted({
        "scheduler_block_size": rank.block_size,
        "max_num_tokens": rank.max_num_batched_tokens,
        "max_batch_size": rank.max_num_seqs,
        "memory_fraction_kind": kind, "memory_fraction_value": fraction,
        "tp_size": config.tp, "pp_size": config.pp, "attention_dp_size": config.attention_dp,
        "moe_tp_size": config.moe_tp_size, "moe_ep_size": config.moe_ep_size,
        "gemm_quant_mode": config.gemm_dtype, "moe_quant_mode": config.moe_dtype,
        "fmha_quant_mode": config.fmha_dtype, "kvcache_quant_mode": config.kv_cache_dtype,
        "comm_quant_mode": config.comm_dtype, "systems_path": config.systems_path,
    }.items()))


def _deployment(config: AicConfig, version: ResolvedVersion) -> str:
    return (f"{config.model} on {config.system} with {config.backend} {version.version}, "
            f"tp {config.tp}, pp {config.pp}, attention_dp {config.attention_dp}")


def _validated(config, context) -> tuple[AicConfig, ResolvedVersion]:
    parsed = parse_config(config, context.path)
    check_engine_agreement(parsed, context, context.path)
    return parsed, resolve_backend_version(parsed, context.path)


@functools.lru_cache(maxsize=16)
def _model(config: AicConfig, version: ResolvedVersion, path: str) -> AicTimingModel:
    """One model per deployment and process, so a sweep over worker counts compiles once and
    shares its predictions; a first prediction here turns missing-data errors into config
    errors before the replay starts."""
    try:
        engine = aic_calls.compiled_engine(config.model, config.system, config.backend,
                                           version.version, _compile_options(config))
        engine.predict_prefill_latency(1, 1, 0)
        engine.predict_decode_latency(1, 1, 2)
    except Exception as error:
        raise ConfigError(f"{path}: {aic_calls.AIC_DISTRIBUTION} cannot time "
                          f"{_deployment(config, version)}: {type(error).__name__}: {error}"
                          ) from error
    return AicTimingModel(engine, config, version)


class AicTiming:
    """The provider: builds a role's timing model and estimates its KV capacity."""

    NAME = "aic"

    @classmethod
    def from_config(cls, config, context) -> AicTimingModel:
        parsed, version = _validated(config, context)
        return _model(parsed, version, context.path)

    @classmethod
    def estimate_num_gpu_blocks(cls, config, context) -> int:
        """Blocks of the role's ``block_size`` that fit one rank's KV cache, from the engine's
        batch limits and the backend's memory fraction (called only when the role did not set
        ``num_gpu_blocks``)."""
        parsed, version = _validated(config, context)
        rank = context.engine
        try:
            blocks = aic_calls.estimated_num_gpu_blocks(
                parsed.model, parsed.system, parsed.backend, version.version,
                _capacity_options(parsed, rank))
        except Exception as error:
            raise ConfigError(f"{context.path}: {aic_calls.AIC_DISTRIBUTION} cannot estimate the "
                              f"KV capacity of {_deployment(parsed, version)}: "
                              f"{type(error).__name__}: {error}") from error
        if blocks <= 0:
            rank_path = context.path.rsplit(".timing_model", 1)[0]
            raise ConfigError(
                f"{rank_path}.num_gpu_blocks: {aic_calls.AIC_DISTRIBUTION} estimated {blocks} KV "
                f"blocks of {rank.block_size} tokens for {_deployment(parsed, version)}; the "
                f"model leaves no room for KV cache (set num_gpu_blocks or use more GPUs)")
        return blocks

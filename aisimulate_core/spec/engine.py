"""Engine configuration: one scheduler rank (`EngineConfig`) and its replay wrappers.

Field names, defaults and accepted values follow the reference's `engine/config.rs` and
`replay/engine.rs` (SEMANTICS.md §2.1, §2.2). Value rules live in validate.py.
"""

from typing import Any, Literal

import attrs

from .converter import Problem, converter, key_path, one_of, register_object, show, unknown_field_message

Backend = Literal["vllm", "sglang", "trtllm"]
WorkerType = Literal["aggregated", "prefill", "decode"]
Stage = WorkerType

# KV block size a backend uses when the rank does not give one.
DEFAULT_BLOCK_SIZE = {"vllm": 64, "sglang": 1, "trtllm": 32}
DEFAULT_NUM_GPU_BLOCKS = 16_384
TIMING_TYPES = ("fixed", "polynomial", "external")


@attrs.frozen
class TimingModelConfig:
    """`{"type": "polynomial"}` | `{"type": "fixed", "prefill_ms", "decode_ms"}` |
    `{"type": "external", "provider", "config"}`.

    `params` holds the fields beside `type` for the built-in types (fixed: prefill_ms and
    decode_ms as floats; polynomial: none); the runtime resolves `type` and external
    `provider` names against the timing-provider registry and hands each its own config.
    """

    type: str = "polynomial"
    params: dict[str, Any] = attrs.field(factory=dict)
    provider: str | None = None
    config: Any = None


@attrs.frozen
class SglangConfig:
    schedule_policy: Literal["fifo", "lpm"] = "fifo"
    max_prefill_tokens: int = 16_384
    chunked_prefill_size: int = 8_192
    clip_max_new_tokens: int = 4_096
    schedule_conservativeness: float = 1.0
    vlm_cache_bytes: int = 100 * 1024 * 1024
    host_loop: bool = False


@attrs.frozen
class TrtllmConfig:
    capacity_scheduler_policy: Literal["guaranteed_no_evict"] = "guaranteed_no_evict"


@attrs.frozen
class NativeHostOffloadConfig:
    num_host_blocks: int
    d2h_bandwidth_gbps: float = 32.0
    h2d_bandwidth_gbps: float = 32.0


@attrs.frozen(kw_only=True)
class G3OffloadConfig:
    scope: Literal["worker_local", "cluster_shared"]
    num_g3_blocks: int
    latency_to_first_byte_ms: float = 0.1
    read_bandwidth_gbps: float = 10.0
    write_bandwidth_gbps: float = 10.0
    shared_read_bandwidth_gbps: float = 80.0
    shared_write_bandwidth_gbps: float = 80.0


@attrs.frozen
class StateCacheConfig:
    bytes_per_request: int


@attrs.frozen(kw_only=True)
class FrontendStage:
    workers: int = 1
    service_ms: float
    concurrency_scale: tuple[float, ...] = ()


@attrs.frozen
class FrontendConfig:
    stages: tuple[FrontendStage, ...]


@attrs.frozen
class EngineConfig:
    """One scheduler rank. `block_size` defaults by backend (vllm 64, sglang 1, trtllm 32)."""

    backend: Backend = "vllm"
    num_gpu_blocks: int = DEFAULT_NUM_GPU_BLOCKS
    block_size: int = DEFAULT_BLOCK_SIZE["vllm"]
    max_model_len: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8_192
    prefill_schedule_interval: int = 1
    prefill_decode_interval: int = 0
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    speedup_ratio: float = 1.0
    decode_speedup_ratio: float = 1.0
    aic_nextn: int | None = None
    aic_nextn_accept_rates: str | None = None
    aic_mtp_seed: int = 42
    worker_type: WorkerType = "aggregated"
    preemption_mode: Literal["lifo", "fifo"] = "lifo"
    emit_kv_events: bool = False
    emit_kv_token_ids: bool = False
    kv_transfer_bytes_per_token: int | None = None
    kv_cache_bytes_per_token: int | None = None
    native_host_offload: NativeHostOffloadConfig | None = None
    g3_offload: G3OffloadConfig | None = None
    state_cache: StateCacheConfig | None = None
    kv_transfer_bandwidth: float | None = None
    kv_transfer_timing_mode: Literal["full_prompt", "destination_missing"] = "full_prompt"
    timing_model: TimingModelConfig = TimingModelConfig()
    sglang: SglangConfig = SglangConfig()
    trtllm: TrtllmConfig = TrtllmConfig()
    frontend: FrontendConfig | None = None
    vision: bool = False


@attrs.frozen
class ReplayRoleConfig:
    """A rank group for one stage. `num_gpu_blocks_is_explicit` is always resolved on load:
    the given value, else whether `rank` set `num_gpu_blocks` (a timing provider may
    estimate the capacity only when it is not explicit)."""

    dp_size: int = 1
    tensor_parallel_size: int = 1
    num_gpu_blocks_is_explicit: bool = False
    rank: EngineConfig = EngineConfig()

    @property
    def gpus_per_worker(self) -> int:
        return self.dp_size * self.tensor_parallel_size


@attrs.frozen
class ReplayEngineConfig:
    """The spec's `engine`: the aggregated rank group plus optional disaggregated roles
    (a missing role falls back to the aggregated one)."""

    dp_size: int = 1
    tensor_parallel_size: int = 1
    num_gpu_blocks_is_explicit: bool = False
    rank: EngineConfig = EngineConfig()
    prefill: ReplayRoleConfig | None = None
    decode: ReplayRoleConfig | None = None
    # stage -> the role ``role`` made: loading and building a payload ask for each a dozen
    # times, and making one takes two ``attrs.evolve`` calls (tens of microseconds). Not a
    # field of the JSON (init=False: not structured, unstructured or compared).
    _roles: dict = attrs.field(factory=dict, init=False, repr=False, eq=False)

    def role(self, stage: Stage) -> ReplayRoleConfig:
        """The rank group serving `stage`, with `rank.worker_type` forced to the stage."""
        role = self._roles.get(stage)
        if role is not None:
            return role
        given = {"prefill": self.prefill, "decode": self.decode}.get(stage)
        role = given or ReplayRoleConfig(
            dp_size=self.dp_size,
            tensor_parallel_size=self.tensor_parallel_size,
            num_gpu_blocks_is_explicit=self.num_gpu_blocks_is_explicit,
            rank=self.rank,
        )
        if role.rank.worker_type != stage:
            role = attrs.evolve(role, rank=attrs.evolve(role.rank, worker_type=stage))
        self._roles[stage] = role
        return role


# -- structuring --------------------------------------------------------------------------


def _prepare_rank(data: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    if data.get("block_size") is None:
        # Absent or null: the backend's native size. An invalid backend is reported by
        # its own field; the class default stands in meanwhile.
        data.pop("block_size", None)
        backend = data.get("backend", "vllm")
        if type(backend) is str and backend in DEFAULT_BLOCK_SIZE:
            data["block_size"] = DEFAULT_BLOCK_SIZE[backend]
    return data, []


def _prepare_rank_group(data: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    if data.get("num_gpu_blocks_is_explicit") is None:
        rank = data.get("rank")
        data["num_gpu_blocks_is_explicit"] = type(rank) is dict and "num_gpu_blocks" in rank
    for role in ("prefill", "decode"):
        if role in data and data[role] is None:
            del data[role]
    return data, []


def _structure_timing(value: Any, _: Any) -> TimingModelConfig:
    if type(value) is not dict:
        raise Problem(f"expected an object, got {show(value)}")
    kind = value.get("type")
    if "type" not in value:
        hint = " (the tag is 'type', not 'kind')" if "kind" in value else ""
        raise Problem("is required" + hint, ".type")
    if type(kind) is not str or kind not in TIMING_TYPES:
        raise Problem(f"must be one of {one_of(TIMING_TYPES)}, got {show(kind)}", ".type")
    fields = {"fixed": ("prefill_ms", "decode_ms"), "polynomial": (), "external": ("provider", "config")}[kind]
    problems: list[Problem] = []
    for key in value:
        if key != "type" and key not in fields:
            problems.append(Problem(unknown_field_message(key, fields, {"kind": "type"}), key_path(key)))
    values: dict[str, Any] = {}
    for key in fields:
        if key == "config":
            continue
        if key not in value:
            problems.append(Problem("is required", key_path(key)))
            continue
        hook = converter.get_structure_hook(str if key == "provider" else float)
        try:
            values[key] = hook(value[key], None)
        except Problem as exc:
            problems.append(Problem(exc.message, key_path(key)))
    if problems:
        if len(problems) == 1:
            raise problems[0]
        raise ExceptionGroup("timing_model", problems)
    if kind == "external":
        return TimingModelConfig(type=kind, provider=values["provider"], config=value.get("config"))
    return TimingModelConfig(type=kind, params=values)


def _unstructure_timing(timing: TimingModelConfig) -> dict[str, Any]:
    if timing.type == "external":
        return {"type": "external", "provider": timing.provider, "config": timing.config}
    return {"type": timing.type, **timing.params}


register_object(EngineConfig, preprocess=_prepare_rank, aliases={"kv_bytes_per_token": "kv_transfer_bytes_per_token"})
register_object(ReplayRoleConfig, preprocess=_prepare_rank_group)
register_object(ReplayEngineConfig, preprocess=_prepare_rank_group)
converter.register_structure_hook(TimingModelConfig, _structure_timing)
converter.register_unstructure_hook(TimingModelConfig, _unstructure_timing)

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_NUM_GPU_BLOCKS",
    "EngineConfig",
    "FrontendConfig",
    "FrontendStage",
    "G3OffloadConfig",
    "NativeHostOffloadConfig",
    "ReplayEngineConfig",
    "ReplayRoleConfig",
    "SglangConfig",
    "StateCacheConfig",
    "TimingModelConfig",
    "TrtllmConfig",
]

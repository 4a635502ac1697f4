"""Value rules of a structured payload (phase two of loading).

Each rule adds `(path, rule)`; messages read `<rule>, got <value>`. The rules are the
reference's (`engine/config.rs` validate, `replay/spec.rs` validate, the binding's
`build_runtime_input`), plus a few from its public traffic schema, marked `public schema`.
"""

import math
from typing import Any

from .bounds import (check_deployment_bounds, check_rank_bounds, check_request_bounds, check_request_count,
                     check_synthetic_bounds, check_trace_bounds)
from .converter import U32_MAX, one_of, show
from .engine import EngineConfig, ReplayEngineConfig, ReplayRoleConfig
from .replay import Payload, ReplaySpec
from .topology import AggregatedTopology, WorkerPoolSpec
from .traffic import SyntheticTraffic, TraceTraffic

AGENTIC_FORMATS = ("agentic_mooncake", "weka")
# how a weka subagent's inner timestamps are read (CLUSTER.md 5.1)
WEKA_TIMESTAMP_BASES = ("auto", "absolute", "relative")


class Checker:
    """Collects problems; the helpers add one when a value breaks their rule."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def add(self, path: str, rule: str) -> None:
        self.problems.append((path, rule))

    def positive(self, path: str, value: int | None) -> None:
        if value is not None and value <= 0:
            self.add(path, f"must be > 0, got {show(value)}")

    def u32(self, path: str, value: int | None) -> None:
        if value is not None and value > U32_MAX:
            self.add(path, f"must be <= {U32_MAX}, got {value}")

    def finite_nonnegative(self, path: str, value: float | None) -> None:
        if value is not None and not (math.isfinite(value) and value >= 0):
            self.add(path, f"must be finite and >= 0, got {show(value)}")

    def finite_positive(self, path: str, value: float | None) -> None:
        if value is not None and not (math.isfinite(value) and value > 0):
            self.add(path, f"must be finite and > 0, got {show(value)}")

    def nonempty(self, path: str, value: str | None) -> None:
        if value is not None and not value.strip():
            self.add(path, f"must not be empty, got {show(value)}")


# -- engine -------------------------------------------------------------------------------


def _accept_rates(text: str) -> list[str]:
    """Problems of a comma-separated conditional acceptance-rate list (empty: defaults)."""
    problems = []
    if not text.strip():
        return problems
    for index, part in enumerate(text.split(",")):
        part = part.strip()
        try:
            rate = float(part) if "_" not in part else math.nan
        except ValueError:
            rate = math.nan
        if not (math.isfinite(rate) and 0.0 <= rate <= 1.0):
            problems.append(f"entry {index} must be a number in [0, 1], got {show(part)}")
    return problems


def check_rank(r: EngineConfig, p: str, c: Checker) -> None:
    c.positive(p + ".num_gpu_blocks", r.num_gpu_blocks)
    c.positive(p + ".block_size", r.block_size)
    if r.backend in ("vllm", "trtllm") and r.block_size == 1:
        c.add(p + ".block_size", f"must be >= 2 for backend '{r.backend}', got 1")
    c.positive(p + ".max_num_seqs", r.max_num_seqs)
    c.positive(p + ".max_num_batched_tokens", r.max_num_batched_tokens)
    c.positive(p + ".prefill_schedule_interval", r.prefill_schedule_interval)
    if r.prefill_schedule_interval > 1 and r.backend != "vllm":
        c.add(p + ".prefill_schedule_interval", f"requires backend 'vllm', got {r.prefill_schedule_interval}")
    if r.prefill_decode_interval != 0 and r.backend != "sglang":
        c.add(p + ".prefill_decode_interval", f"requires backend 'sglang', got {r.prefill_decode_interval}")
    if r.sglang.host_loop and r.backend != "sglang":
        c.add(p + ".sglang.host_loop", "requires backend 'sglang', got true")
    if r.frontend is not None:
        if r.backend != "sglang" or not r.sglang.host_loop:
            c.add(p + ".frontend", "requires backend 'sglang' with sglang.host_loop true")
        if not r.frontend.stages:
            c.add(p + ".frontend.stages", "must not be empty, got []")
        for i, stage in enumerate(r.frontend.stages):
            sp = f"{p}.frontend.stages[{i}]"
            c.positive(sp + ".workers", stage.workers)
            c.finite_nonnegative(sp + ".service_ms", stage.service_ms)
            if stage.concurrency_scale and len(stage.concurrency_scale) != stage.workers:
                c.add(sp + ".concurrency_scale", f"must have one entry per worker ({stage.workers}), got {len(stage.concurrency_scale)} entries")
            for j, scale in enumerate(stage.concurrency_scale):
                c.finite_positive(f"{sp}.concurrency_scale[{j}]", scale)
    if r.vision and r.backend != "sglang":
        c.add(p + ".vision", "requires backend 'sglang', got true")
    c.positive(p + ".max_model_len", r.max_model_len)
    c.finite_nonnegative(p + ".speedup_ratio", r.speedup_ratio)
    c.finite_nonnegative(p + ".decode_speedup_ratio", r.decode_speedup_ratio)
    if r.aic_nextn is not None:
        c.positive(p + ".aic_nextn", r.aic_nextn)
        if r.aic_nextn > 5:
            c.add(p + ".aic_nextn", f"must be <= 5, got {r.aic_nextn}")
        for problem in _accept_rates(r.aic_nextn_accept_rates or ""):
            c.add(p + ".aic_nextn_accept_rates", problem)
        if r.decode_speedup_ratio != 1.0:
            c.add(p + ".decode_speedup_ratio", f"must be 1.0 with aic_nextn, got {show(r.decode_speedup_ratio)}")
    elif r.aic_nextn_accept_rates is not None:
        c.add(p + ".aic_nextn_accept_rates", f"requires aic_nextn, got {show(r.aic_nextn_accept_rates)}")
    if r.backend == "sglang":
        if not r.enable_chunked_prefill:
            c.add(p + ".enable_chunked_prefill", "false is not allowed for backend 'sglang'")
        c.positive(p + ".sglang.max_prefill_tokens", r.sglang.max_prefill_tokens)
        c.positive(p + ".sglang.chunked_prefill_size", r.sglang.chunked_prefill_size)
        chunk = r.sglang.chunked_prefill_size
        if chunk > 0 and r.block_size > 0 and chunk % r.block_size:
            # chunks are cut at page boundaries (the reference rejects this too)
            c.add(p + ".sglang.chunked_prefill_size",
                  f"must be a multiple of block_size {r.block_size}, got {chunk}")
        c.finite_nonnegative(p + ".sglang.schedule_conservativeness", r.sglang.schedule_conservativeness)
    if r.emit_kv_token_ids and not r.emit_kv_events:
        c.add(p + ".emit_kv_token_ids", "requires emit_kv_events true, got true")
    c.positive(p + ".kv_transfer_bytes_per_token", r.kv_transfer_bytes_per_token)
    c.positive(p + ".kv_cache_bytes_per_token", r.kv_cache_bytes_per_token)
    c.finite_nonnegative(p + ".kv_transfer_bandwidth", r.kv_transfer_bandwidth)
    _check_offload(r, p, c)
    check_rank_bounds(r, p, c)
    timing, tp = r.timing_model, p + ".timing_model"
    if timing.type == "fixed":
        for name in ("prefill_ms", "decode_ms"):
            c.finite_nonnegative(f"{tp}.{name}", timing.params[name])
    elif timing.type == "external":
        c.nonempty(tp + ".provider", timing.provider)


def _check_offload(r: EngineConfig, p: str, c: Checker) -> None:
    if r.g3_offload is not None:
        g3, gp = r.g3_offload, p + ".g3_offload"
        c.positive(gp + ".num_g3_blocks", g3.num_g3_blocks)
        for name in ("latency_to_first_byte_ms", "read_bandwidth_gbps", "write_bandwidth_gbps",
                     "shared_read_bandwidth_gbps", "shared_write_bandwidth_gbps"):
            c.finite_nonnegative(f"{gp}.{name}", getattr(g3, name))
        if r.native_host_offload is None:
            c.add(gp, "requires native_host_offload")
    if r.native_host_offload is not None:
        host, hp = r.native_host_offload, p + ".native_host_offload"
        c.positive(hp + ".num_host_blocks", host.num_host_blocks)
        c.finite_nonnegative(hp + ".d2h_bandwidth_gbps", host.d2h_bandwidth_gbps)
        c.finite_nonnegative(hp + ".h2d_bandwidth_gbps", host.h2d_bandwidth_gbps)
        if r.backend != "vllm":
            c.add(hp, f"requires backend 'vllm', got {show(r.backend)}")
        if r.worker_type != "aggregated":
            c.add(hp, f"requires worker_type 'aggregated', got {show(r.worker_type)}")
        if not r.enable_prefix_caching:
            c.add(hp, "requires enable_prefix_caching true, got false")
        if r.aic_nextn is not None:
            c.add(hp, "cannot be combined with aic_nextn")
        if r.kv_cache_bytes_per_token is None:
            c.add(hp, "requires kv_cache_bytes_per_token")
    if r.state_cache is not None:
        sp = p + ".state_cache"
        c.positive(sp + ".bytes_per_request", r.state_cache.bytes_per_request)
        if r.backend != "vllm":
            c.add(sp, f"requires backend 'vllm', got {show(r.backend)}")
        if r.worker_type != "aggregated":
            c.add(sp, f"requires worker_type 'aggregated', got {show(r.worker_type)}")
        for other in ("native_host_offload", "g3_offload", "kv_transfer_bytes_per_token", "kv_transfer_bandwidth"):
            if getattr(r, other) is not None:
                c.add(sp, f"cannot be combined with {other}")
        if r.kv_transfer_timing_mode != "full_prompt":
            c.add(sp, f"requires kv_transfer_timing_mode 'full_prompt', got {show(r.kv_transfer_timing_mode)}")
        if r.kv_cache_bytes_per_token is None:
            c.add(sp, "requires kv_cache_bytes_per_token")
        elif r.block_size >= 2 and r.kv_cache_bytes_per_token > 0 and r.state_cache.bytes_per_request > 0:
            state_blocks = -(-r.state_cache.bytes_per_request // (r.block_size * r.kv_cache_bytes_per_token))
            if r.num_gpu_blocks < state_blocks + 1:
                c.add(p + ".num_gpu_blocks", f"must be >= {state_blocks + 1} to hold one token block and one state, got {r.num_gpu_blocks}")


def _check_group(group: ReplayEngineConfig | ReplayRoleConfig, p: str, c: Checker) -> None:
    for name in ("dp_size", "tensor_parallel_size"):
        c.positive(f"{p}.{name}", getattr(group, name))
        c.u32(f"{p}.{name}", getattr(group, name))
    check_rank(group.rank, p + ".rank", c)


def role_path(engine: ReplayEngineConfig, stage: str, engine_path: str) -> str:
    """Where the rank group serving `stage` was written in the payload."""
    if stage in ("prefill", "decode") and getattr(engine, stage) is not None:
        return f"{engine_path}.{stage}"
    return engine_path


def check_engine(engine: ReplayEngineConfig, topology: Any, p: str, c: Checker) -> None:
    _check_group(engine, p, c)
    for stage in ("prefill", "decode"):
        role = getattr(engine, stage)
        if role is not None:
            _check_group(role, f"{p}.{stage}", c)
    if isinstance(topology, AggregatedTopology):
        if engine.rank.native_host_offload is not None and engine.dp_size != 1:
            c.add(p + ".dp_size", f"must be 1 with native_host_offload, got {engine.dp_size}")
    else:
        for stage in ("prefill", "decode"):
            if engine.role(stage).rank.native_host_offload is not None:
                c.add(role_path(engine, stage, p) + ".rank.native_host_offload", "requires aggregated topology")
        _check_roles_match(engine, p, c)


def _check_roles_match(engine: ReplayEngineConfig, p: str, c: Checker) -> None:
    """The reference replays one engine type and one block size across the two roles (its
    offline disaggregated replay refuses anything else; other rank fields may differ).

    The problem names the role written as an override: a role that falls back to the
    aggregated rank is the base the other deviates from (the decode role when both are written).
    """
    blamed, other = ("prefill", "decode") if engine.prefill is not None and engine.decode is None else ("decode", "prefill")
    blamed_rank, other_rank = engine.role(blamed).rank, engine.role(other).rank
    where = role_path(engine, blamed, p) + ".rank"
    if blamed_rank.backend != other_rank.backend:
        c.add(where + ".backend", f"must match the {other} role's backend {show(other_rank.backend)} "
                                  f"in a disaggregated topology, got {show(blamed_rank.backend)}")
    elif blamed_rank.block_size != other_rank.block_size:
        # checked only under one backend: a backend's default block size follows the backend
        c.add(where + ".block_size", f"must equal the {other} role's block_size ({other_rank.block_size}) "
                                     f"in a disaggregated topology, got {blamed_rank.block_size}")


# -- spec ---------------------------------------------------------------------------------


def _check_pool(pool: WorkerPoolSpec, p: str, c: Checker) -> None:
    c.positive(p + ".initial_workers", pool.initial_workers)
    c.finite_nonnegative(p + ".startup_delay_ms", pool.startup_delay_ms)


def _check_metadata(metadata: Any, p: str, c: Checker) -> None:
    if metadata is None:
        return
    if type(metadata) is not dict:
        c.add(p, f"expected an object, got {show(metadata)}")
        return
    for name, low, high in (("priority", -(2**31), 2**31 - 1), ("strict_priority", 0, U32_MAX)):
        if name in metadata:
            value = metadata[name]
            if type(value) is not int:
                c.add(f"{p}.{name}", f"expected an integer, got {show(value)}")
            elif not low <= value <= high:
                c.add(f"{p}.{name}", f"must be in [{low}, {high}], got {value}")
    if "policy_class" in metadata and metadata["policy_class"] is not None and type(metadata["policy_class"]) is not str:
        c.add(p + ".policy_class", f"expected a string, got {show(metadata['policy_class'])}")


def check_requests(spec: ReplaySpec, p: str, c: Checker) -> None:
    aggregated = isinstance(spec.topology, AggregatedTopology)
    decode_dp = spec.engine.role("aggregated" if aggregated else "decode").dp_size
    # (read only in a disaggregated spec: an aggregated one refuses any prefill_dp_rank, and
    # its engine's prefill role, a copy with the worker type forced, need not be made)
    prefill_dp = None if aggregated else spec.engine.role("prefill").dp_size
    first_index: dict[str, int] = {}
    check_request_count(len(spec.requests), p, c)
    for i, r in enumerate(spec.requests):
        rp = f"{p}[{i}]"
        if not r.id:
            c.add(rp + ".id", 'must not be empty, got ""')
        elif r.id in first_index:
            c.add(rp + ".id", f"must be unique (also {p}[{first_index[r.id]}].id), got {show(r.id)}")
        else:
            first_index[r.id] = i
        c.finite_nonnegative(rp + ".arrival_time_ms", r.arrival_time_ms)
        if r.input_token_ids is not None and len(r.input_token_ids) != r.input_tokens:
            c.add(rp + ".input_token_ids", f"must have input_tokens ({r.input_tokens}) entries, got {len(r.input_token_ids)}")
        if r.dp_rank is not None and r.dp_rank >= decode_dp:
            c.add(rp + ".dp_rank", f"must be < dp_size ({decode_dp}), got {r.dp_rank}")
        if r.prefill_dp_rank is not None:
            if aggregated:
                c.add(rp + ".prefill_dp_rank", f"requires disaggregated topology, got {r.prefill_dp_rank}")
            elif r.prefill_dp_rank >= prefill_dp:
                c.add(rp + ".prefill_dp_rank", f"must be < prefill dp_size ({prefill_dp}), got {r.prefill_dp_rank}")
        _check_metadata(r.metadata, rp + ".metadata", c)
        check_request_bounds(r, rp, c)


def check_spec(spec: ReplaySpec, p: str, c: Checker) -> None:
    if spec.version != 1:
        c.add(p + ".version", f"must be 1, got {spec.version}")
    topology = spec.topology
    if isinstance(topology, AggregatedTopology):
        _check_pool(topology.workers, p + ".topology.workers", c)
    else:
        _check_pool(topology.prefill, p + ".topology.prefill", c)
        _check_pool(topology.decode, p + ".topology.decode", c)
        c.finite_nonnegative(p + ".topology.handoff_latency_ms", topology.handoff_latency_ms)
    check_engine(spec.engine, topology, p + ".engine", c)
    check_deployment_bounds(spec, role_path, p, c)
    c.nonempty(p + ".adapters.placement.provider", spec.adapters.placement.provider)
    c.nonempty(p + ".adapters.scaling.provider", spec.adapters.scaling.provider)
    c.finite_nonnegative(p + ".max_sim_time_ms", spec.max_sim_time_ms)
    c.positive(p + ".max_in_flight", spec.max_in_flight)
    for name in ("ttft_ms", "itl_ms", "e2e_ms"):
        c.finite_positive(f"{p}.sla.{name}", getattr(spec.sla, name))
    if spec.sla.e2e_ms is not None and (spec.sla.ttft_ms is not None or spec.sla.itl_ms is not None):
        c.add(p + ".sla.e2e_ms", f"cannot be combined with ttft_ms or itl_ms, got {show(spec.sla.e2e_ms)}")
    if spec.encoder is not None:
        e, ep = spec.encoder, p + ".encoder"
        c.positive(ep + ".instances", e.instances)
        c.positive(ep + ".max_batch", e.max_batch)
        if len(e.forward_ms_by_batch) != e.max_batch:
            c.add(ep + ".forward_ms_by_batch", f"must have max_batch ({e.max_batch}) entries, got {len(e.forward_ms_by_batch)}")
        c.finite_nonnegative(ep + ".preprocess_ms", e.preprocess_ms)
        for i, forward_ms in enumerate(e.forward_ms_by_batch):
            c.finite_nonnegative(f"{ep}.forward_ms_by_batch[{i}]", forward_ms)
        c.finite_positive(ep + ".transfer_bandwidth_gb_s", e.transfer_bandwidth_gb_s)
    check_requests(spec, p + ".requests", c)


# -- traffic ------------------------------------------------------------------------------


def check_synthetic(t: SyntheticTraffic, p: str, c: Checker) -> None:
    load = t.load_type
    for name in ("isl", "osl"):
        if getattr(t, name) is None:
            c.add(f"{p}.{name}", "is required for synthetic traffic")
        c.positive(f"{p}.{name}", getattr(t, name))
    c.positive(p + ".request_count", t.request_count)
    c.finite_positive(p + ".num_request_ratio", t.num_request_ratio)
    if t.request_count is None:
        if t.num_request_ratio is None:
            c.add(p + ".request_count", "is required (or num_request_ratio)")
        elif load != "kv_capacity_fraction" and t.concurrency is None and t.request_rate is None and t.arrival_interval_ms is None:
            c.add(p + ".num_request_ratio", "requires a load to scale: concurrency, request_rate or arrival_interval_ms")
    c.positive(p + ".concurrency", t.concurrency)
    c.finite_positive(p + ".request_rate", t.request_rate)
    c.finite_positive(p + ".arrival_interval_ms", t.arrival_interval_ms)
    if load == "concurrency" and t.concurrency is None:
        c.add(p + ".concurrency", "is required for load_type 'concurrency'")
    elif load == "poisson" and t.request_rate is None:
        c.add(p + ".request_rate", "is required for load_type 'poisson'")
    elif load == "constant_rate":
        if t.request_rate is None and t.arrival_interval_ms is None:
            c.add(p + ".arrival_interval_ms", "is required for load_type 'constant_rate' (or request_rate)")
        elif t.request_rate is not None and t.arrival_interval_ms is not None:
            c.add(p + ".arrival_interval_ms", f"cannot be combined with request_rate, got {show(t.arrival_interval_ms)}")
    elif load == "kv_capacity_fraction":
        ratio = t.kv_load_ratio
        if ratio is None:
            c.add(p + ".kv_load_ratio", "is required for load_type 'kv_capacity_fraction'")
        elif type(ratio) not in (int, float):
            c.add(p + ".kv_load_ratio", f"must be one number, got {show(ratio)}")
        else:
            c.finite_positive(p + ".kv_load_ratio", float(ratio))
        if t.concurrency is not None:
            c.add(p + ".concurrency", f"cannot be combined with load_type 'kv_capacity_fraction', got {t.concurrency}")
    if not (math.isfinite(t.shared_prefix_ratio) and 0.0 <= t.shared_prefix_ratio <= 1.0):
        c.add(p + ".shared_prefix_ratio", f"must be between 0 and 1, got {show(t.shared_prefix_ratio)}")
    elif t.shared_prefix_ratio > 0 and t.num_prefix_groups == 0:
        c.add(p + ".num_prefix_groups", "must be > 0 when shared_prefix_ratio > 0, got 0")  # public schema
    c.finite_nonnegative(p + ".inter_turn_delay_ms", t.inter_turn_delay_ms)
    if t.source_type == "synthetic-session":
        c.positive(p + ".turns_per_session", t.turns_per_session)
    elif t.turns_per_session is not None and t.turns_per_session != 1:
        c.add(p + ".turns_per_session", f"must be 1 for source_type 'synthetic', got {t.turns_per_session}")
    if t.isl is not None and t.cached_prefix_tokens > t.isl:
        c.add(p + ".cached_prefix_tokens", f"must be <= isl ({t.isl}), got {t.cached_prefix_tokens}")
    check_synthetic_bounds(t, p, c)


def check_trace(t: TraceTraffic, p: str, c: Checker) -> None:
    fmt = t.trace_format
    c.nonempty(p + ".trace_format", fmt)
    if not t.trace_paths and t.trace_path is None:
        c.add(p + ".trace_path", "is required for trace traffic (or trace_paths)")
    c.nonempty(p + ".trace_path", t.trace_path)
    for i, path in enumerate(t.trace_paths):
        c.nonempty(f"{p}.trace_paths[{i}]", path)
    if t.trace_paths and t.trace_path is not None and t.trace_path != t.trace_paths[0]:
        c.add(p + ".trace_path", f"must equal trace_paths[0] when both are given, got {show(t.trace_path)}")
    if len(t.paths) > 1 and fmt != "dynamo":
        c.add(p + ".trace_paths", f"must hold exactly one path for trace_format '{fmt}', got {len(t.paths)}")
    c.positive(p + ".trace_block_size", t.trace_block_size)
    c.finite_positive(p + ".arrival_speedup_ratio", t.arrival_speedup_ratio)
    c.positive(p + ".replay_concurrency", t.replay_concurrency)
    if t.replay_concurrency is not None and t.arrival_speedup_ratio != 1.0:
        c.add(p + ".arrival_speedup_ratio", f"cannot be combined with replay_concurrency, got {show(t.arrival_speedup_ratio)}")  # public schema
    if t.load_type == "concurrency" and t.replay_concurrency is None:
        c.add(p + ".replay_concurrency", "is required for load_type 'concurrency'")
    elif t.load_type == "trace_timestamps" and t.replay_concurrency is not None:
        c.add(p + ".replay_concurrency", f"cannot be combined with load_type 'trace_timestamps', got {t.replay_concurrency}")
    if fmt == "applied_compute_agentic" and t.replay_concurrency is None:
        c.add(p + ".replay_concurrency", "is required for trace_format 'applied_compute_agentic' (its sessions have no timestamps)")
    c.finite_nonnegative(p + ".max_sim_time_ms", t.max_sim_time_ms)
    check_trace_bounds(t, p, c)
    if fmt in AGENTIC_FORMATS:
        if not (t.execution_model or "").strip():
            c.add(p + ".execution_model", f"is required for trace_format '{fmt}'")
        if t.load_type != "trace_timestamps":
            c.add(p + ".load_type", f"must be 'trace_timestamps' for trace_format '{fmt}', got {show(t.load_type)}")
        if t.max_sim_time_ms is not None:
            c.add(p + ".max_sim_time_ms", f"is not allowed for trace_format '{fmt}', got {show(t.max_sim_time_ms)}")
        if t.replay_concurrency is not None and t.load_type != "trace_timestamps":
            c.add(p + ".replay_concurrency", f"is not allowed for trace_format '{fmt}', got {t.replay_concurrency}")
    c.positive(p + ".agentic_lanes", t.agentic_lanes)
    if t.agentic_lanes is not None and fmt not in (*AGENTIC_FORMATS, "dynamo"):
        c.add(p + ".agentic_lanes", f"requires trace_format {one_of((*AGENTIC_FORMATS, 'dynamo'))}, got {t.agentic_lanes}")
    if t.agentic_warmup and t.agentic_snapshot is None:
        c.add(p + ".agentic_warmup", "requires agentic_snapshot, got true")
    if t.agentic_snapshot is not None and (t.load_type != "trace_timestamps" or not t.agentic_lanes or t.replay_concurrency is not None):
        c.add(p + ".agentic_snapshot", "requires load_type 'trace_timestamps', agentic_lanes and no replay_concurrency")
    basis = t.weka_nested_timestamp_basis
    if basis is not None and fmt != "weka":
        c.add(p + ".weka_nested_timestamp_basis", f"requires trace_format 'weka', got {show(basis)}")
    elif basis is not None and basis not in WEKA_TIMESTAMP_BASES:
        c.add(p + ".weka_nested_timestamp_basis", f"must be one of {one_of(WEKA_TIMESTAMP_BASES)}, got {show(basis)}")


def check_payload(payload: Payload, root: str) -> list[tuple[str, str]]:
    """Every value-rule problem of `payload`; `root` is the spec's path (`$.spec` or `$`)."""
    c = Checker()
    spec = payload.spec
    check_spec(spec, root, c)
    traffic = payload.traffic
    if traffic is not None:
        tp = "$.traffic"
        if isinstance(traffic, SyntheticTraffic):
            check_synthetic(traffic, tp, c)
        else:
            check_trace(traffic, tp, c)
            if (spec.max_sim_time_ms is not None and traffic.max_sim_time_ms is not None
                    and spec.max_sim_time_ms != traffic.max_sim_time_ms):
                c.add(tp + ".max_sim_time_ms", f"must equal {root}.max_sim_time_ms when both are given, got {show(traffic.max_sim_time_ms)}")
            if traffic.trace_format in ("mooncake-delta", "agentic_mooncake") and not isinstance(spec.topology, AggregatedTopology):
                c.add(tp + ".trace_format", f"requires aggregated topology, got {show(traffic.trace_format)}")  # public schema
        if spec.requests:
            c.add(root + ".requests", f"must be empty when traffic is given, got {len(spec.requests)} requests")
    return c.problems


__all__ = ["Checker", "check_payload", "role_path"]

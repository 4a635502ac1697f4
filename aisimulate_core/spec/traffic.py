"""The envelope's `traffic` (the reference binding's RuntimeTraffic) and the arithmetic that
turns synthetic traffic into a concrete workload (SEMANTICS.md §1.7, §5)."""

import math
from typing import Any, Literal

import attrs

from aisimulate_core.errors import ConfigError

from .bounds import MAX_REQUESTS
from .converter import Problem, converter, key_path, one_of, register_object, show
from .topology import AggregatedTopology

SyntheticLoad = Literal["concurrency", "poisson", "constant_rate", "kv_capacity_fraction"]
SOURCE_TYPES = ("synthetic", "synthetic-session", "trace")
DEFAULT_TRACE_BLOCK_SIZE = 512
# Trace formats whose files embed their block size; a given trace_block_size must match it.
EMBEDDED_BLOCK_SIZE_FORMATS = ("dynamo", "weka")


@attrs.frozen
class SyntheticTraffic:
    """`synthetic` (one turn per session) or `synthetic-session` (`turns_per_session`
    turns whose inputs accumulate). Lengths are fixed: `isl` new input tokens and `osl`
    output tokens per turn."""

    source_type: Literal["synthetic", "synthetic-session"]
    load_type: SyntheticLoad = "concurrency"
    isl: int | None = None
    osl: int | None = None
    request_count: int | None = None
    num_request_ratio: float | None = None
    concurrency: int | None = None
    request_rate: float | None = None
    arrival_interval_ms: float | None = None
    arrival_seed: int = 42
    # None for `synthetic`; `synthetic-session` gets 4 unless given.
    turns_per_session: int | None = None
    shared_prefix_ratio: float = 0.0
    num_prefix_groups: int = 0
    inter_turn_delay_ms: float = 0.0
    cached_prefix_tokens: int = 0
    # Any JSON: the Python optimizer may carry a list; execution needs one number.
    kv_load_ratio: Any = None


@attrs.frozen
class TraceTraffic:
    """A trace file (or several, for `dynamo`) replayed by authored timestamps, or in a
    closed loop of `replay_concurrency` sessions."""

    source_type: Literal["trace"] = "trace"
    load_type: Literal["trace_timestamps", "concurrency"] | None = None
    trace_path: str | None = None
    trace_paths: tuple[str, ...] = ()
    trace_format: str = "mooncake"
    # 512 unless the format embeds its own (dynamo, weka), where a value is an assertion.
    trace_block_size: int | None = None
    arrival_speedup_ratio: float = 1.0
    replay_concurrency: int | None = None
    max_sim_time_ms: float | None = None
    execution_model: str | None = None
    agentic_lanes: int | None = None
    agentic_snapshot: Any = None
    agentic_warmup: bool = False
    weka_nested_timestamp_basis: str | None = None

    @property
    def paths(self) -> tuple[str, ...]:
        """The files to read: `trace_paths` when given, else `trace_path`."""
        if self.trace_paths:
            return self.trace_paths
        return (self.trace_path,) if self.trace_path is not None else ()


Traffic = SyntheticTraffic | TraceTraffic

_SYNTHETIC_FIELDS = frozenset(a.name for a in attrs.fields(SyntheticTraffic))
_TRACE_FIELDS = frozenset(a.name for a in attrs.fields(TraceTraffic))


def _structure_traffic(value: Any, _: Any) -> Traffic:
    if type(value) is not dict:
        raise Problem(f"expected an object, got {show(value)}")
    if "source_type" not in value:
        raise Problem("is required", ".source_type")
    source = value["source_type"]
    if type(source) is not str or source not in SOURCE_TYPES:
        raise Problem(f"must be one of {one_of(SOURCE_TYPES)}, got {show(source)}", ".source_type")
    cls = TraceTraffic if source == "trace" else SyntheticTraffic
    return converter.get_structure_hook(cls)(value, cls)


def _prepare(own: frozenset[str], other: frozenset[str], kind: str):
    def prepare(data: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
        problems: list[Problem] = []
        for key in list(data):
            # Every RuntimeTraffic field is optional in the reference: null means absent.
            if data[key] is None and key != "agentic_warmup":
                del data[key]
            elif key not in own and key in other:
                if kind == "synthetic" and key == "trace_block_size":
                    # The reference runner adds it to every payload; synthetic ignores it.
                    del data[key]
                    continue
                problems.append(Problem(f"only applies to {'trace' if kind == 'synthetic' else 'synthetic'} traffic", key_path(key)))
                del data[key]
        return data, problems

    return prepare


register_object(SyntheticTraffic, preprocess=_prepare(_SYNTHETIC_FIELDS, _TRACE_FIELDS, "synthetic"))
register_object(TraceTraffic, preprocess=_prepare(_TRACE_FIELDS, _SYNTHETIC_FIELDS, "trace"))
converter.register_structure_hook(Traffic, _structure_traffic)
# cattrs would otherwise disambiguate the optional union by itself.
converter.register_structure_hook(Traffic | None, lambda v, t: None if v is None else _structure_traffic(v, t))


# -- synthetic traffic resolved against the deployment ------------------------------------


@attrs.frozen
class ResolvedSynthetic:
    """What the synthetic workload generator needs (the binding's `build_runtime_input`).

    `arrival_kind` is `burst` (every first turn at t=0), `constant_qps` (gap 1000/qps) or
    `poisson_qps` (exponential gaps seeded by `arrival_seed`). `max_in_flight` is the
    closed-loop session cap (None: open loop). `block_size` is the engine block size the
    driver hashes prompts at.
    """

    session_count: int
    turns: int
    accumulate: bool
    isl: int
    osl: int
    arrival_kind: Literal["burst", "constant_qps", "poisson_qps"]
    arrival_qps: float | None
    arrival_seed: int
    max_in_flight: int | None
    shared_prefix_ratio: float
    num_prefix_groups: int
    inter_turn_delay_ms: float | None
    cached_prefix_tokens: int
    block_size: int
    seed: int = 0


def round_half_away(x: float) -> int:
    """Rust's `f64::round` (ties away from zero) for finite x >= 0, then `as usize`."""
    whole = math.floor(x)
    return int(whole) + (1 if x - whole >= 0.5 else 0)


def kv_capacity(traffic: SyntheticTraffic, spec: Any) -> int:
    """Requests of `isl + osl//2` tokens that fit the KV cache of the serving pool (decode
    pool when disaggregated): `(num_gpu_blocks × block_size × dp_size × workers) // (isl + osl//2)`."""
    if isinstance(spec.topology, AggregatedTopology):
        role, workers = spec.engine.role("aggregated"), spec.topology.workers.initial_workers
    else:
        role, workers = spec.engine.role("decode"), spec.topology.decode.initial_workers
    total_tokens = role.rank.num_gpu_blocks * role.rank.block_size * role.dp_size * workers
    return total_tokens // (traffic.isl + traffic.osl // 2)


def resolve_synthetic(traffic: SyntheticTraffic, spec: Any, root: str = "$.traffic") -> ResolvedSynthetic:
    """Concrete session count, arrival process and in-flight cap of validated synthetic
    traffic. Pass the spec after any timing provider materialized `num_gpu_blocks`: the
    KV-relative load reads the capacity from it.

    - kv_capacity_fraction: cap = max(1, floor(kv_load_ratio × kv_capacity)); an error
      when the capacity is 0. The cap replaces `spec.max_in_flight`, as in the reference.
    - otherwise the cap is `concurrency` (any load type), combined with `spec.max_in_flight`
      by the smaller value.
    - sessions = request_count, else max(1, round(num_request_ratio × load)) with load the
      cap, else request_rate, else 1000 / arrival_interval_ms; Rust rounding.
    """
    cap = traffic.concurrency
    if traffic.load_type == "kv_capacity_fraction":
        capacity = kv_capacity(traffic, spec)
        if capacity <= 0:
            raise ConfigError(
                f"{root}.kv_load_ratio: KV capacity cannot hold one request of isl + osl/2 = "
                f"{traffic.isl + traffic.osl // 2} tokens, got capacity 0"
            )
        cap = max(1, math.floor(float(traffic.kv_load_ratio) * capacity))
    elif spec.max_in_flight is not None:
        cap = spec.max_in_flight if cap is None else min(cap, spec.max_in_flight)

    if traffic.request_count is not None:
        sessions = traffic.request_count
    else:
        if traffic.load_type == "kv_capacity_fraction":
            load = float(cap)
        elif traffic.concurrency is not None:
            load = float(traffic.concurrency)
        elif traffic.request_rate is not None:
            load = traffic.request_rate
        else:
            load = 1000.0 / traffic.arrival_interval_ms
        sessions = max(1, round_half_away(traffic.num_request_ratio * load))
        turns = (traffic.turns_per_session or 4) if traffic.source_type == "synthetic-session" else 1
        if sessions * turns > MAX_REQUESTS:
            raise ConfigError(f"{root}.num_request_ratio: gives {sessions * turns} requests, more "
                              f"than {MAX_REQUESTS}, got {show(traffic.num_request_ratio)}")

    if traffic.load_type == "poisson":
        kind, qps = "poisson_qps", traffic.request_rate
    elif traffic.load_type == "constant_rate":
        kind = "constant_qps"
        qps = traffic.request_rate if traffic.request_rate is not None else 1000.0 / traffic.arrival_interval_ms
        if not math.isfinite(qps) or qps <= 0:
            raise ConfigError(f"{root}.arrival_interval_ms: gives a rate that is not finite, got {show(traffic.arrival_interval_ms)}")
    else:
        kind, qps = "burst", None

    session = traffic.source_type == "synthetic-session"
    if isinstance(spec.topology, AggregatedTopology):
        block_size = spec.engine.role("aggregated").rank.block_size
    else:
        block_size = spec.engine.role("prefill").rank.block_size
    return ResolvedSynthetic(
        session_count=sessions,
        turns=(traffic.turns_per_session or 4) if session else 1,
        accumulate=session,
        isl=traffic.isl,
        osl=traffic.osl,
        arrival_kind=kind,
        arrival_qps=qps,
        arrival_seed=traffic.arrival_seed,
        max_in_flight=cap,
        shared_prefix_ratio=traffic.shared_prefix_ratio,
        num_prefix_groups=traffic.num_prefix_groups,
        inter_turn_delay_ms=traffic.inter_turn_delay_ms if traffic.inter_turn_delay_ms > 0 else None,
        cached_prefix_tokens=traffic.cached_prefix_tokens,
        block_size=block_size,
    )


__all__ = [
    "DEFAULT_TRACE_BLOCK_SIZE",
    "ResolvedSynthetic",
    "SyntheticTraffic",
    "TraceTraffic",
    "Traffic",
    "kv_capacity",
    "resolve_synthetic",
    "round_half_away",
]

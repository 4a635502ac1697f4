"""The execution payload: attrs classes, one strict cattrs converter, path-qualified errors.

`load_payload(data)` turns JSON text (or a parsed dict) into a validated `Payload`;
`spec_to_dict` gives the canonical JSON shape back; `resolve_synthetic` makes synthetic
traffic concrete against a spec. Field names are the JSON names of SEMANTICS.md.
"""

from .engine import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_NUM_GPU_BLOCKS,
    EngineConfig,
    FrontendConfig,
    FrontendStage,
    G3OffloadConfig,
    NativeHostOffloadConfig,
    ReplayEngineConfig,
    ReplayRoleConfig,
    SglangConfig,
    StateCacheConfig,
    TimingModelConfig,
    TrtllmConfig,
)
from .load import load_payload, parse_json, spec_to_dict
from .replay import EncoderSpec, Payload, ProviderSpec, ReplayAdapters, ReplaySpec, SlaThresholds
from .requests import ReplayRequest
from .support import UNSUPPORTED
from .topology import AggregatedTopology, DisaggregatedTopology, Topology, WorkerPoolSpec
from .traffic import (
    DEFAULT_TRACE_BLOCK_SIZE,
    ResolvedSynthetic,
    SyntheticTraffic,
    TraceTraffic,
    Traffic,
    kv_capacity,
    resolve_synthetic,
    round_half_away,
)

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_NUM_GPU_BLOCKS",
    "DEFAULT_TRACE_BLOCK_SIZE",
    "UNSUPPORTED",
    "AggregatedTopology",
    "DisaggregatedTopology",
    "EncoderSpec",
    "EngineConfig",
    "FrontendConfig",
    "FrontendStage",
    "G3OffloadConfig",
    "NativeHostOffloadConfig",
    "Payload",
    "ProviderSpec",
    "ReplayAdapters",
    "ReplayEngineConfig",
    "ReplayRequest",
    "ReplayRoleConfig",
    "ReplaySpec",
    "ResolvedSynthetic",
    "SglangConfig",
    "SlaThresholds",
    "StateCacheConfig",
    "SyntheticTraffic",
    "TimingModelConfig",
    "Topology",
    "TraceTraffic",
    "Traffic",
    "TrtllmConfig",
    "WorkerPoolSpec",
    "kv_capacity",
    "load_payload",
    "parse_json",
    "resolve_synthetic",
    "round_half_away",
    "spec_to_dict",
]

"""The replay spec (SEMANTICS.md §3.1) and the execution payload that wraps it."""

from typing import Any

import attrs

from .converter import Problem, register_object
from .engine import ReplayEngineConfig
from .requests import ReplayRequest
from .topology import Topology
from .traffic import Traffic


@attrs.frozen
class ProviderSpec:
    """A placement or scaling provider by registry name, with its own JSON config."""

    provider: str
    config: Any = None


@attrs.frozen
class ReplayAdapters:
    placement: ProviderSpec = ProviderSpec(provider="round_robin")
    scaling: ProviderSpec = ProviderSpec(provider="none")


@attrs.frozen
class SlaThresholds:
    """Per-request goodput bounds; all unset means no SLA (no goodput keys)."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None

    @property
    def is_set(self) -> bool:
        return self.ttft_ms is not None or self.itl_ms is not None or self.e2e_ms is not None


@attrs.frozen
class EncoderSpec:
    """SGLang encoder pool in front of the language workers (reference `EncoderSpec`)."""

    instances: int
    max_batch: int
    preprocess_ms: float
    forward_ms_by_batch: tuple[float, ...]
    transfer_bytes_per_request: int
    transfer_bandwidth_gb_s: float


@attrs.frozen(kw_only=True)
class ReplaySpec:
    """Requests are sorted by `arrival_time_ms` (stable) once loaded."""

    version: int = 1
    topology: Topology
    engine: ReplayEngineConfig = ReplayEngineConfig()
    adapters: ReplayAdapters = ReplayAdapters()
    max_sim_time_ms: float | None = None
    max_in_flight: int | None = None
    record_per_request: bool = True
    sla: SlaThresholds = SlaThresholds()
    encoder: EncoderSpec | None = None
    requests: tuple[ReplayRequest, ...] = ()


@attrs.frozen
class Payload:
    """One execution: a spec and, optionally, traffic that replaces its `requests`."""

    spec: ReplaySpec
    traffic: Traffic | None = None
    capture_performance_diagnostics: bool = False

    @property
    def max_sim_time_ms(self) -> float | None:
        """The virtual-time cutoff: the spec's, else the trace traffic's (they must agree)."""
        if self.spec.max_sim_time_ms is not None:
            return self.spec.max_sim_time_ms
        return getattr(self.traffic, "max_sim_time_ms", None)


def _prepare_spec(data: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    if "engine" in data and data["engine"] is None:
        del data["engine"]  # null engine: defaults, as in the reference
    return data, []


register_object(ReplaySpec, preprocess=_prepare_spec)

__all__ = ["EncoderSpec", "Payload", "ProviderSpec", "ReplayAdapters", "ReplaySpec", "SlaThresholds"]

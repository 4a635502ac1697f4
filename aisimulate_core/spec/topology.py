"""Worker pools of the spec's `topology` (tagged by `kind`), SEMANTICS.md §3.1."""

from typing import Literal

import attrs

from .converter import register_tagged_union


@attrs.frozen
class WorkerPoolSpec:
    initial_workers: int
    # Applies to workers added later by a scaling policy; initial workers are ready at t=0.
    startup_delay_ms: float = 0.0


@attrs.frozen(kw_only=True)
class AggregatedTopology:
    kind: Literal["aggregated"] = "aggregated"
    workers: WorkerPoolSpec


@attrs.frozen(kw_only=True)
class DisaggregatedTopology:
    kind: Literal["disaggregated"] = "disaggregated"
    prefill: WorkerPoolSpec
    decode: WorkerPoolSpec
    # Used only when KV bytes and bandwidth cannot give a transfer time.
    handoff_latency_ms: float = 0.0


Topology = AggregatedTopology | DisaggregatedTopology

register_tagged_union(Topology, "kind", {"aggregated": AggregatedTopology, "disaggregated": DisaggregatedTopology})

__all__ = ["AggregatedTopology", "DisaggregatedTopology", "Topology", "WorkerPoolSpec"]

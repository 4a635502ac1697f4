"""Trace formats for aisimulate, registered through the entry point ``trace_formats``.

Each format parses its files into the core's workload model (``aisimulate_core.workload.trace``
or ``aisimulate_core.workload.graph``); see ``aisimulate_core.workload.formats`` for the
contract.
"""

from __future__ import annotations

from aisimulate_core.hookspecs import Register, hookimpl

from .agentic_mooncake import AgenticMooncake
from .applied_compute import AppliedComputeAgentic
from .dynamo import Dynamo
from .mooncake import Mooncake, MooncakeDelta
from .weka import Weka

FORMATS = (Mooncake, MooncakeDelta, AgenticMooncake, AppliedComputeAgentic, Dynamo, Weka)

__all__ = ["AgenticMooncake", "AppliedComputeAgentic", "Dynamo", "FORMATS", "Mooncake",
           "MooncakeDelta", "Weka"]


@hookimpl
def aisimulate_register_trace_formats(register: Register) -> None:
    for fmt in FORMATS:
        register(fmt)

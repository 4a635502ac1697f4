"""aisimulate-core: a GPU-free discrete-event simulator of LLM inference serving.

Public API: ``run_replay_json`` (JSON in, JSON out), ``run_replay`` (returns a ``Report``),
``build_simulation`` (a steppable ``Simulation`` for embedding), the plugin host
(``hookimpl``, ``make_plugin_manager``) and the provider contracts.
"""

from .api import run_replay, run_replay_json
from .engine.request import SimRequest
from .engine.timing import FixedTiming, PolynomialTiming, TimingContext
from .errors import (AisimError, ConfigError, NativeError, PluginError, SimulationError,
                     TraceError, UnknownPluginError)
from .hookspecs import hookimpl
from .placement import PlacementPolicy, PlacementRequest, PoolView, WorkerView
from .plugins import make_plugin_manager
from .registry import Registries, Registry, collect_registries
from .report import Report
from .runtime.build import build_simulation
from .runtime.simulation import Simulation
from .spec import load_payload
from .workload.formats import TraceFormat
from .workload.graph import AgenticTrace
from .workload.prompt import Prompt
from .workload.trace import Trace

__version__ = "0.1.0"

__all__ = [
    "AisimError", "ConfigError", "FixedTiming", "NativeError", "PlacementPolicy",
    "PlacementRequest", "PluginError", "PolynomialTiming", "PoolView", "Prompt", "Registries",
    "Registry", "Report", "SimRequest", "Simulation", "SimulationError", "TimingContext",
    "AgenticTrace", "Trace", "TraceFormat", "TraceError", "UnknownPluginError", "WorkerView", "build_simulation", "collect_registries",
    "hookimpl", "load_payload", "make_plugin_manager", "run_replay", "run_replay_json",
]

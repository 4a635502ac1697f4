"""Traffic of a payload -> the workload driver that feeds the runtime.

Trace traffic follows the reference binding: the format plugin loads the files into the
core's model; a session ``Trace`` is validated, its session starts normalized and sped up,
and replayed by timestamps or, with ``replay_concurrency``, in a closed loop over sessions;
an ``AgenticTrace`` has its ``not_before_ms`` normalized and its timing sped up, and is
replayed by the dependency-graph driver, which takes no concurrency cap and no time cutoff.
"""

from __future__ import annotations

from ..errors import ConfigError, PluginError
from ..spec.converter import show
from .agentic import AgenticDriver
from .driver import TimedDriver
from .graph import AgenticTrace
from .lone_turns import LoneTurns
from .sessions import SessionDriver
from .trace import Trace, fail_unstarted, validate_trace
from .transforms import (normalize_graph_starts, normalize_session_starts, speed_up_graph,
                         speed_up_timing)


def build_driver(payload, trace_formats, *, request_factories):
    """Returns ``(driver, max_in_flight)`` for the payload's traffic (``trace_formats``: the
    trace-format registry, or a lookup of it such as guards.TraceFormatLookup).

    ``max_in_flight`` is the runtime's cap on requests in flight (None: none); closed-loop
    drivers hold their own session cap and return None.
    """
    spec = payload.spec
    traffic = payload.traffic
    if traffic is None:
        return TimedDriver(request_factories(spec.requests)), spec.max_in_flight
    if traffic.source_type in ("synthetic", "synthetic-session"):
        from ..spec import resolve_synthetic
        from .synthetic import synthetic_driver
        return synthetic_driver(resolve_synthetic(traffic, spec)), None
    return trace_driver(payload, load_trace(traffic, trace_formats)), None


def load_trace(traffic, lookup):
    """Run the format plugin named by ``trace_format`` (in ``lookup``) on the traffic's files."""
    loader = lookup.get(traffic.trace_format)()
    # a format may ask for traffic fields of its own by name (weka: its timestamp basis)
    wanted = getattr(lookup.provider(traffic.trace_format).cls, "TRAFFIC_OPTIONS", ())
    options = {name: getattr(traffic, name) for name in wanted}
    loaded = _load(loader, traffic, options)
    if not isinstance(loaded, (Trace, AgenticTrace)):
        raise PluginError(f"trace format '{traffic.trace_format}' returned "
                          f"{type(loaded).__name__}, expected a Trace or an AgenticTrace")
    return loaded


def _load(loader, traffic, options):
    return loader.load(traffic.paths, trace_block_size=traffic.trace_block_size, **options)


def trace_driver(payload, loaded):
    traffic = payload.traffic
    ratio = traffic.arrival_speedup_ratio
    if isinstance(loaded, AgenticTrace):
        check_agentic_envelope(payload)
        return AgenticDriver(speed_up_graph(normalize_graph_starts(loaded), ratio),
                             lanes=traffic.agentic_lanes)
    if traffic.agentic_lanes is not None:
        # the reference's rule: lanes pace plays, which a session trace has none of
        raise ConfigError(f"$.traffic.agentic_lanes: requires an agentic trace (trace_format "
                          f"'{traffic.trace_format}' loaded sessions), got {traffic.agentic_lanes}")
    # (the walks below need none of their own; lone turns' columns are checked as columns)
    sessions = loaded.sessions
    facts = sessions.facts(loaded.block_size) if type(sessions) is LoneTurns else None
    if facts is None:
        facts = validate_trace(loaded)
    trace = speed_up_timing(normalize_session_starts(loaded, facts.earliest_start), ratio)
    cap = traffic.replay_concurrency
    if payload.spec.max_in_flight is not None:
        cap = payload.spec.max_in_flight if cap is None else min(cap, payload.spec.max_in_flight)
    if cap is None and facts.unstarted is not None:
        fail_unstarted(facts.unstarted)   # check_timestamped's error
    # The reference replays a timestamped trace of lone turns as a flat request list, whose
    # records carry no session; every other trace goes through its session driver.
    return SessionDriver(trace, max_sessions=cap,
                         session_metadata=cap is not None or not facts.single_turn,
                         total_turns=facts.total_turns)


def check_agentic_envelope(payload):
    """An agentic graph paces itself: no concurrency cap, no time cutoff, and a target model
    must be named (the reference's rules; the wheel replays weka and agentic Dynamo graphs on
    disaggregated pools too)."""
    traffic = payload.traffic
    spec = payload.spec
    why = f"for an agentic trace (trace_format '{traffic.trace_format}')"
    problems = []
    if not (traffic.execution_model or "").strip():
        problems.append(f"$.traffic.execution_model: is required {why}")
    if traffic.replay_concurrency is not None:
        problems.append(f"$.traffic.replay_concurrency: is not allowed {why}, "
                        f"got {traffic.replay_concurrency}")
    if traffic.max_sim_time_ms is not None:
        problems.append(f"$.traffic.max_sim_time_ms: is not allowed {why}, "
                        f"got {show(traffic.max_sim_time_ms)}")
    if spec.max_sim_time_ms is not None and traffic.max_sim_time_ms is None:
        problems.append(f"$.spec.max_sim_time_ms: is not allowed {why}, "
                        f"got {show(spec.max_sim_time_ms)}")
    if spec.max_in_flight is not None:
        problems.append(f"$.spec.max_in_flight: is not allowed {why}, got {spec.max_in_flight}")
    if problems:
        raise ConfigError("\n".join(problems))

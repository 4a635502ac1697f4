"""Traffic of a payload -> the workload driver that feeds the runtime."""

from __future__ import annotations

from .driver import TimedDriver


def build_driver(payload, registries, *, request_factories):
    """Returns ``(driver, max_in_flight)`` for the payload's traffic.

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
    fmt = registries.trace_formats.get(traffic.trace_format)
    return fmt.build_driver(traffic, spec, registries), None

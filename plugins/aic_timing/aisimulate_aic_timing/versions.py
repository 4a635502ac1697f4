"""Which perf-database version of the backend a config runs on.

The original runtime defaults to vllm 0.19.0, sglang 0.5.10 and trtllm 1.3.0rc10, but
aiconfigurator-core 0.12.0 holds no usable data for them (only communication and MoE fill
tables), so a config without ``backend_version`` runs on the database's current version for its
system, and the report says which. An explicit version must have data; the slot aliases
``current``, ``previous`` and ``next`` name such versions too.
"""

from __future__ import annotations

import attrs

from aisimulate_core.errors import ConfigError

from . import aic_calls
from .config import AicConfig, show

SLOT_ALIASES = ("current", "previous", "next")


@attrs.frozen
class ResolvedVersion:
    version: str
    source: str  # "explicit" or "database current"


def resolve_backend_version(config: AicConfig, path: str) -> ResolvedVersion:
    system, backend, systems_path = config.system, config.backend, config.systems_path
    slots = aic_calls.version_slots(system, backend, systems_path)
    if slots is not None:
        with_data = _slot_listing(slots)
    else:
        with_data = list(aic_calls.declared_versions(system, backend, systems_path))
    if not with_data:
        known = ", ".join(aic_calls.systems_with_data(backend, systems_path)) or "none"
        raise ConfigError(
            f"{path}.system: {_package()} has no {backend} performance data for system "
            f"{show(system)}; systems with {backend} data: {known}")

    requested = config.backend_version
    if requested is None:
        if slots is not None:
            return ResolvedVersion(slots["current"], "database current")
        return ResolvedVersion(aic_calls.latest_version(system, backend, systems_path)
                               or with_data[-1], "database latest")
    if slots is not None and requested in SLOT_ALIASES and requested in slots:
        return ResolvedVersion(slots[requested], "explicit")
    if slots is not None and requested in slots.values():
        return ResolvedVersion(requested, "explicit")
    if slots is None and requested in with_data:
        return ResolvedVersion(requested, "explicit")
    raise ConfigError(
        f"{path}.{config.key('backend_version')}: {_package()} has no {backend} performance "
        f"data for version {show(requested)} on {system}; versions with data: "
        f"{', '.join(with_data)}")


def _slot_listing(slots: dict[str, str]) -> list[str]:
    """``["0.24.0 (current)", "0.27.0 (next)"]``: each version once, with its slot names."""
    names: dict[str, list[str]] = {}
    for slot in SLOT_ALIASES:
        if slot in slots:
            names.setdefault(slots[slot], []).append(slot)
    return [f"{version} ({', '.join(slot_names)})" for version, slot_names in names.items()]


def _package() -> str:
    return f"{aic_calls.AIC_DISTRIBUTION} {aic_calls.AIC_VERSION}"

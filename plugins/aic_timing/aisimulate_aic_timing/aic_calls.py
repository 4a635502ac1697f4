"""Every call into aiconfigurator-core, in one module.

The package is slow to warm up (version-slot discovery about 0.4 s, a cold ``compile_engine``
about 1.3 s, the first prediction about 0.3 s for the Rust database load) and fully
deterministic, so whatever is expensive is cached for the life of the process: a sweep that runs
the same deployment many times pays for it once.
"""

from __future__ import annotations

import functools
import logging
from importlib.metadata import version as distribution_version

AIC_DISTRIBUTION = "aiconfigurator-core"
AIC_VERSION = distribution_version(AIC_DISTRIBUTION)

# Our dtype field -> the package's enum of quant modes for it.
QUANT_ENUMS = {
    "gemm_dtype": "GEMMQuantMode",
    "moe_dtype": "MoEQuantMode",
    "fmha_dtype": "FMHAQuantMode",
    "kv_cache_dtype": "KVCacheQuantMode",
    "comm_dtype": "CommQuantMode",
}


def quiet_package_logging() -> None:
    """The package logs fallback-table warnings through a logger without handlers, which
    Python prints on stderr; a user who configured that logger keeps their level."""
    logger = logging.getLogger("aiconfigurator_core")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.ERROR)


@functools.cache
def quant_mode_names(field: str) -> tuple[str, ...]:
    from aiconfigurator_core.sdk import common

    return tuple(member.name for member in getattr(common, QUANT_ENUMS[field]))


@functools.cache
def version_slots(system: str, backend: str, systems_path: str | None) -> dict[str, str] | None:
    """``{"current": v, "next": v, ...}``: the versions the database maintains, or None when
    the data tree declares no slots for this system and backend."""
    from aiconfigurator_core.sdk import perf_database

    quiet_package_logging()
    slots = perf_database.get_version_slots(system, backend, systems_paths=systems_path)
    return dict(slots) if slots else None


@functools.cache
def _supported_databases(systems_path: str | None) -> dict[str, dict[str, tuple[str, ...]]]:
    from aiconfigurator_core.sdk import perf_database

    quiet_package_logging()
    found = perf_database.get_supported_databases(systems_paths=systems_path)
    return {system: {backend: tuple(versions) for backend, versions in by_backend.items()}
            for system, by_backend in found.items()}


def declared_versions(system: str, backend: str, systems_path: str | None) -> tuple[str, ...]:
    """Versions with data for this system and backend (slow on first use: it scans every system)."""
    return _supported_databases(systems_path).get(system, {}).get(backend, ())


def systems_with_data(backend: str, systems_path: str | None) -> list[str]:
    return sorted(system for system, by_backend in _supported_databases(systems_path).items()
                  if by_backend.get(backend))


@functools.cache
def latest_version(system: str, backend: str, systems_path: str | None) -> str | None:
    from aiconfigurator_core.sdk import perf_database

    return perf_database.get_latest_database_version(system, backend, systems_paths=systems_path)


@functools.lru_cache(maxsize=16)
def compiled_engine(model: str, system: str, backend: str, version: str, options: tuple):
    """An ``AicEngine`` for one deployment; ``options`` is ``compile_engine``'s keyword
    arguments as sorted ``(name, value)`` pairs so that the cache key is exact."""
    import aiconfigurator_core
    from aiconfigurator_core.sdk.engine import compile_engine

    quiet_package_logging()
    kwargs = dict(options)
    spec = compile_engine(model, system, backend, version, **kwargs)
    return aiconfigurator_core.AicEngine.from_spec(spec, kwargs.get("systems_path"))


@functools.lru_cache(maxsize=64)
def estimated_num_gpu_blocks(model: str, system: str, backend: str, version: str,
                             options: tuple) -> int:
    """``estimate_num_gpu_blocks`` with ``options`` as sorted ``(name, value)`` pairs."""
    from aiconfigurator_core.sdk.memory import estimate_num_gpu_blocks

    quiet_package_logging()
    return int(estimate_num_gpu_blocks(model, system, backend, version, **dict(options)))

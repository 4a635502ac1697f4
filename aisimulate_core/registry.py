"""Name-keyed registries of provider classes, filled once from the register hooks."""

from __future__ import annotations

import importlib.metadata
from typing import Any, Callable, Iterable

import attrs
import pluggy

from aisimulate_core.errors import ConfigError, PluginError, UnknownPluginError
from aisimulate_core.messages import escape_controls
from aisimulate_core.plugins import call_plugin, hook_implementations


def qualified_name(cls: Any) -> str:
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", None) or getattr(cls, "__name__", None) or repr(cls)
    return f"{module}.{name}" if module else name


# Providers of the distributions bundled in this repository (plugins/*), so that a core
# installed alone can say what to install; keep in step with plugins/*/pyproject.toml and the
# core's extras in pyproject.toml.
BUNDLED_PROVIDERS: dict[tuple[str, str], str] = {
    **{("placement policy", name): "aisimulate-placement"
       for name in ("round_robin", "kv_router", "kv_aware", "least_loaded")},
    **{("trace format", name): "aisimulate-trace-formats"
       for name in ("mooncake", "mooncake-delta", "agentic_mooncake", "applied_compute_agentic",
                    "dynamo", "weka")},
    ("timing provider", "aic"): "aisimulate-aic-timing",
}
EXTRA_OF_DISTRIBUTION = {
    "aisimulate-placement": "placement",
    "aisimulate-trace-formats": "trace-formats",
    "aisimulate-aic-timing": "aic",
}


@attrs.frozen
class Provider:
    """One registered provider class and the plugin (and distribution) that registered it."""

    name: str
    cls: type
    plugin: str | None = None
    distribution: str | None = None
    kind: str = "provider"

    def label(self) -> str:
        """``placement policy 'NAME' from DISTRIBUTION VERSION`` (or ``of plugin 'P'``)."""
        if self.distribution:
            origin = f" from {self.distribution}"
        elif self.plugin:
            origin = f" of plugin '{self.plugin}'"
        else:
            origin = ""
        return f"{self.kind} '{self.name}'{origin}"


class Registry:
    """Provider classes of one kind ("placement policy", ...) keyed by their ``NAME``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._providers: dict[str, Provider] = {}

    def register(self, cls: type, plugin: str | None = None, distribution: str | None = None) -> None:
        name = getattr(cls, "NAME", None)
        if not isinstance(name, str) or not name:
            raise PluginError(
                f"{self.kind} {qualified_name(cls)} must have a NAME attribute (a non-empty str)"
            )
        existing = self._providers.get(name)
        if existing is not None:
            raise PluginError(
                f"duplicate {self.kind} '{name}': provided by "
                f"{qualified_name(existing.cls)} and {qualified_name(cls)}"
            )
        self._providers[name] = Provider(name, cls, plugin, distribution, self.kind)

    def get(self, name: str) -> type:
        """The provider class registered as ``name``; UnknownPluginError lists the installed ones."""
        return self.provider(name).cls

    def provider(self, name: str) -> Provider:
        """The registration of ``name`` (class, plugin, distribution); UnknownPluginError lists
        the installed names and, for a bundled provider, the distribution that ships it."""
        provider = self._providers.get(name)
        if provider is None:
            installed = ", ".join(self.names()) or "(nothing)"
            raise UnknownPluginError(f"unknown {self.kind} {show_name(name)}; installed: "
                                     f"{installed}{where_to_get(self.kind, name)}")
        return provider

    def names(self) -> list[str]:
        return sorted(self._providers)

    def providers(self) -> list[Provider]:
        return [self._providers[name] for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._providers

    def __len__(self) -> int:
        return len(self._providers)


def show_name(name: object) -> str:
    """A provider name as a payload gave it, quoted for a one-line message."""
    return f"'{escape_controls(name)}'" if isinstance(name, str) else escape_controls(repr(name))


def where_to_get(kind: str, name: object) -> str:
    """``; it is provided by ...`` for a bundled provider whose distribution is not installed,
    else '' (an installed one was left out on purpose: blocked, or not given to the manager)."""
    distribution = BUNDLED_PROVIDERS.get((kind, name)) if isinstance(name, str) else None
    if distribution is None:
        return ""
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return (f"; it is provided by the {distribution} distribution: "
                f"pip install 'aisimulate-core[{EXTRA_OF_DISTRIBUTION[distribution]}]'")
    return ""


@attrs.frozen
class Registries:
    """The providers of every kind available to one run."""

    timing: Registry = attrs.field(factory=lambda: Registry("timing provider"))
    trace_formats: Registry = attrs.field(factory=lambda: Registry("trace format"))
    placement: Registry = attrs.field(factory=lambda: Registry("placement policy"))
    scaling: Registry = attrs.field(factory=lambda: Registry("scaling policy"))

    def by_hook(self) -> dict[str, Registry]:
        return {
            "aisimulate_register_timing_providers": self.timing,
            "aisimulate_register_trace_formats": self.trace_formats,
            "aisimulate_register_placement_policies": self.placement,
            "aisimulate_register_scaling_policies": self.scaling,
        }


def collect_registries(pm: pluggy.PluginManager) -> Registries:
    """Call every register hook implementation exactly once and collect what they register.

    Each implementation is called directly, in registration order (entry points, explicit
    plugins, built-ins), rather than through the hook caller, so that every provider is
    attributed to the plugin that registered it; register hooks return nothing, so nothing of
    pluggy's result handling is lost.
    """
    registries = Registries()
    distribution_of = getattr(pm, "distribution_of", None)
    for hook_name, registry in registries.by_hook().items():
        for impl in hook_implementations(pm, hook_name):
            distribution = distribution_of(impl.plugin_name) if distribution_of else None
            register = _register_for(registry, impl.plugin_name, distribution)
            call_plugin(pm, impl, hook_name, register=register)
    return registries


def registries_of(pm: pluggy.PluginManager) -> Registries:
    """``collect_registries(pm)``, kept on the manager for the runs that share it: what the
    register hooks register depends only on the plugins registered, and a run should not pay
    the hooks (and the imports they do) again. A manager whose plugins changed since (one
    registered or unregistered) is collected again; a collection that fails is not kept."""
    plugins = pm.get_plugins()
    kept = getattr(pm, "_aisimulate_registries", None)
    if kept is not None and kept[0] == plugins:
        return kept[1]
    registries = collect_registries(pm)
    try:
        pm._aisimulate_registries = (plugins, registries)
    except AttributeError:  # a manager that takes no attributes: collected every run
        pass
    return registries


def _register_for(registry: Registry, plugin: str, distribution: str | None) -> Callable[[type], None]:
    def register(cls: type) -> None:
        registry.register(cls, plugin=plugin, distribution=distribution)

    return register


def check_provider_config(config: Any, allowed: Iterable[str], path: str) -> dict:
    """``config`` as a dict; ConfigError naming ``path`` if it is not an object or has unknown keys."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: must be an object, got {type(config).__name__}")
    allowed = frozenset(allowed)
    unknown = sorted(str(key) for key in config if key not in allowed)
    if unknown:
        raise ConfigError("\n".join(f"{path}.{key}: unknown field" for key in unknown))
    return dict(config)

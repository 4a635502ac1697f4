"""Name-keyed registries of provider classes, filled once from the register hooks."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import attrs
import pluggy

from aisimulate_core.errors import AisimError, ConfigError, PluginError, UnknownPluginError


def qualified_name(cls: Any) -> str:
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", None) or getattr(cls, "__name__", None) or repr(cls)
    return f"{module}.{name}" if module else name


@attrs.frozen
class Provider:
    """One registered provider class and the plugin (and distribution) that registered it."""

    name: str
    cls: type
    plugin: str | None = None
    distribution: str | None = None


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
        self._providers[name] = Provider(name, cls, plugin, distribution)

    def get(self, name: str) -> type:
        """The provider class registered as ``name``; UnknownPluginError lists the installed ones."""
        provider = self._providers.get(name)
        if provider is None:
            installed = ", ".join(self.names()) or "(nothing)"
            raise UnknownPluginError(f"unknown {self.kind} '{name}'; installed: {installed}")
        return provider.cls

    def names(self) -> list[str]:
        return sorted(self._providers)

    def providers(self) -> list[Provider]:
        return [self._providers[name] for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._providers

    def __len__(self) -> int:
        return len(self._providers)


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
        caller: pluggy.HookCaller = getattr(pm.hook, hook_name)
        for impl in caller.get_hookimpls():
            if impl.hookwrapper or impl.wrapper:
                raise PluginError(f"plugin '{impl.plugin_name}': {hook_name} cannot be a hook wrapper")
            distribution = distribution_of(impl.plugin_name) if distribution_of else None
            register = _register_for(registry, impl.plugin_name, distribution)
            try:
                impl.function(**{argname: register for argname in impl.argnames})
            except AisimError:
                raise
            except Exception as error:
                raise PluginError(
                    f"plugin '{impl.plugin_name}' failed in {hook_name}: {type(error).__name__}: {error}"
                ) from error
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

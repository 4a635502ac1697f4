"""Build the plugin manager: hookspecs, blocks, entry points, explicit plugins, then built-ins.

Nothing happens at import time; every run (and every embedding simulator) builds its own manager.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any, Iterable

import attrs
import pluggy

from aisimulate_core import hookspecs
from aisimulate_core.errors import AisimError, PluginError
from aisimulate_core.messages import escape_controls

ENTRY_POINT_GROUP = "aisimulate"
BUILTINS_NAME = "builtins"
CORE_DISTRIBUTION = "aisimulate-core"
BLOCK_PREFIX = "no:"


@attrs.frozen
class LoadFailure:
    """An entry-point plugin that could not be loaded; the other plugins loaded regardless."""

    name: str
    distribution: str | None
    error: Exception

    def message(self) -> str:
        source = f" from {self.distribution}" if self.distribution else ""
        if isinstance(self.error, AisimError):
            reason = str(self.error)
        else:
            reason = f"{type(self.error).__name__}: {self.error}"
        return escape_controls(f"plugin '{self.name}'{source} failed to load: {reason}")


class AisimPluginManager(pluggy.PluginManager):
    """A pluggy manager that also remembers load failures and where each plugin came from."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.load_failures: list[LoadFailure] = []
        self._distributions: dict[str, str] = {}

    def distribution_of(self, plugin_name: str) -> str | None:
        """``"<distribution> <version>"`` of a registered plugin, or None if not known."""
        return self._distributions.get(plugin_name)

    def register_plugin(self, plugin: Any, name: str | None, distribution: str | None) -> None:
        """Register one plugin; a hook no spec defines makes it a PluginError (and unregistered).

        Without this check a misspelt hook name would be silently ignored.
        """
        try:
            registered_name = self.register(plugin, name=name)
        except (pluggy.PluginValidationError, ValueError) as error:
            label = name or self.get_canonical_name(plugin)
            raise PluginError(f"plugin '{label}' cannot be registered: {error}") from error
        if registered_name is None:  # blocked
            return
        unknown = [
            caller.name
            for caller in self.get_hookcallers(plugin) or ()
            if not caller.has_spec()
            and any(impl.plugin is plugin and not impl.optionalhook for impl in caller.get_hookimpls())
        ]
        if unknown:
            self.unregister(plugin)
            raise PluginError(
                f"plugin '{registered_name}' implements unknown hook(s): {', '.join(sorted(unknown))}"
            )
        if distribution is not None:
            self._distributions[registered_name] = distribution


def make_plugin_manager(
    autoload: bool = True,
    plugins: Iterable[Any] = (),
    blocked: Iterable[str] = (),
) -> AisimPluginManager:
    """A plugin manager with the aisimulate hookspecs and its plugins registered.

    ``plugins`` holds plugin objects or names: a str names an entry point of group
    ``aisimulate`` or else a module to import; ``"no:NAME"`` blocks NAME like ``blocked`` does.
    With ``autoload`` every entry point of the group is loaded, one by one: one that fails is
    recorded in ``load_failures`` and the rest still load. An explicit plugin that fails raises
    PluginError. The core built-ins are registered last, under the name ``"builtins"``, which
    cannot be blocked.
    """
    pm = AisimPluginManager()
    pm.add_hookspecs(hookspecs)
    plugins = list(plugins)
    blocked = [*blocked, *(plugin[len(BLOCK_PREFIX) :] for plugin in plugins
                           if isinstance(plugin, str) and plugin.startswith(BLOCK_PREFIX))]
    for name in blocked:
        if name == BUILTINS_NAME:
            # as pytest refuses `-p no:` for its essential plugins: without them no run works
            raise PluginError(f"plugin '{BUILTINS_NAME}' cannot be blocked: it provides the "
                              "core's own timing providers and scaling policy")
        pm.set_blocked(name)
    if autoload:
        _load_entry_points(pm)
    for plugin in plugins:
        if isinstance(plugin, str):
            if not plugin.startswith(BLOCK_PREFIX):
                _register_named(pm, plugin)
        elif not pm.is_registered(plugin):
            pm.register_plugin(plugin, name=None, distribution=None)
    from aisimulate_core import builtins

    pm.register_plugin(builtins, name=BUILTINS_NAME, distribution=_distribution_named(CORE_DISTRIBUTION))
    return pm


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _describe(dist: Any) -> str | None:
    if dist is None:
        return None
    return "{} {}".format(*_name_and_version(dist))


def _name_and_version(dist: Any) -> tuple[str, str]:
    """Read from the metadata's header block: ``dist.metadata`` parses the whole file (the
    long description too) with the email parser, and ``dist.version`` parses it again, about
    a millisecond per plugin at every start of the command."""
    try:
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    except Exception:  # a distribution without files (a test's stand-in): its parsed metadata
        text = None
    if text:
        found: dict[str, str] = {}
        for line in text.split("\n\n", 1)[0].splitlines():
            key, colon, value = line.partition(":")
            if colon and key in ("Name", "Version") and key not in found:
                found[key] = value.strip()
        if len(found) == 2:
            return found["Name"], found["Version"]
    return dist.metadata["Name"], dist.version


def _load_entry_points(pm: AisimPluginManager) -> None:
    for entry_point in _entry_points():
        if pm.has_plugin(entry_point.name) or pm.is_blocked(entry_point.name):
            continue
        distribution = _describe(getattr(entry_point, "dist", None))
        try:
            pm.register_plugin(entry_point.load(), name=entry_point.name, distribution=distribution)
        except Exception as error:  # a broken plugin must not stop the others
            pm.load_failures.append(LoadFailure(entry_point.name, distribution, error))


def _register_named(pm: AisimPluginManager, name: str) -> None:
    if pm.has_plugin(name) or pm.is_blocked(name):
        return
    entry_point = next((ep for ep in _entry_points() if ep.name == name), None)
    try:
        if entry_point is not None:
            plugin = entry_point.load()
        else:
            plugin = importlib.import_module(name)
    except Exception as error:
        raise PluginError(escape_controls(
            f"cannot load plugin '{name}': {type(error).__name__}: {error}")) from error
    if entry_point is not None:
        distribution = _describe(getattr(entry_point, "dist", None))
    else:
        distribution = _distribution_of_module(name)
    if not pm.is_registered(plugin):
        pm.register_plugin(plugin, name=name, distribution=distribution)


def _distribution_of_module(module_name: str) -> str | None:
    top_level = module_name.partition(".")[0]
    names = importlib.metadata.packages_distributions().get(top_level, ())
    return _distribution_named(names[0]) if names else None


def _distribution_named(name: str) -> str | None:
    try:
        return _describe(importlib.metadata.distribution(name))
    except importlib.metadata.PackageNotFoundError:
        return None


def plugin_label(pm: pluggy.PluginManager, plugin_name: str) -> str:
    """``plugin 'NAME'`` and, when known, the distribution that ships it (for messages)."""
    distribution_of = getattr(pm, "distribution_of", None)
    distribution = distribution_of(plugin_name) if distribution_of else None
    return f"plugin '{plugin_name}'" + (f" from {distribution}" if distribution else "")


def hook_implementations(pm: pluggy.PluginManager, hook_name: str) -> list[Any]:
    """The implementations of ``hook_name`` in registration order (entry points, explicit
    plugins, built-ins); PluginError for a hook wrapper, which these hooks do not support."""
    implementations = getattr(pm.hook, hook_name).get_hookimpls()
    for impl in implementations:
        if impl.hookwrapper or impl.wrapper:
            raise PluginError(f"plugin '{impl.plugin_name}': {hook_name} cannot be a hook wrapper")
    return implementations


def call_plugin(pm: pluggy.PluginManager, impl: Any, hook_name: str, **arguments: Any) -> Any:
    """Call one implementation directly, so that a failure names the plugin that failed:
    an AisimError passes as it is, anything else becomes a PluginError naming the plugin."""
    try:
        return impl.function(**{name: arguments[name] for name in impl.argnames})
    except AisimError:
        raise
    except Exception as error:
        raise PluginError(escape_controls(f"{plugin_label(pm, impl.plugin_name)} failed in "
                                          f"{hook_name}: {type(error).__name__}: {error}")) from error


def call_each_plugin(pm: pluggy.PluginManager, hook_name: str, **arguments: Any) -> None:
    """Call every implementation of a hook that returns nothing, one by one (see call_plugin)."""
    for impl in hook_implementations(pm, hook_name):
        call_plugin(pm, impl, hook_name, **arguments)

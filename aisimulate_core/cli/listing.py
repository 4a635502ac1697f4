"""``aisimulate plugins`` and ``aisimulate --version``: what is installed and loaded."""

from __future__ import annotations

from typing import TextIO

from aisimulate_core.cli.summary import align
from aisimulate_core.plugins import BUILTINS_NAME, CORE_DISTRIBUTION, AisimPluginManager


def print_plugins(pm: AisimPluginManager, out: TextIO) -> None:
    """A table of loaded plugins: one row per hook a plugin implements, with the providers that
    plugin registered through that hook (nothing for hooks that register no provider)."""
    from aisimulate_core.registry import collect_registries

    registry_of_hook = collect_registries(pm).by_hook()
    rows = [["plugin", "distribution", "hook", "provides"]]
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            rows.append([name, "(blocked)", "", ""])
            continue
        hooks = sorted(caller.name for caller in pm.get_hookcallers(plugin) or ())
        distribution = pm.distribution_of(name) or "-"
        for i, hook in enumerate(hooks or ["-"]):
            registry = registry_of_hook.get(hook)
            provided = ""
            if registry is not None:
                names = [p.name for p in registry.providers() if p.plugin == name]
                provided = f"{registry.kind}: {', '.join(names)}" if names else "(none)"
            rows.append([name if i == 0 else "", distribution if i == 0 else "", hook, provided])
    for line in align(rows):
        print(line, file=out)
    if pm.load_failures:
        print("\nfailed to load:", file=out)
        for failure in pm.load_failures:
            print(f"  {failure.message()}", file=out)


def print_version(pm: AisimPluginManager, out: TextIO) -> None:
    """The core's version, then each loaded plugin with the distribution that ships it."""
    from aisimulate_core import __version__

    print(f"{CORE_DISTRIBUTION} {__version__}", file=out)
    for name, plugin in pm.list_name_plugin():
        if plugin is None or name == BUILTINS_NAME:
            continue
        print(f"plugin {name}: {pm.distribution_of(name) or '(not from a distribution)'}", file=out)

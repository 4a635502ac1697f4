"""The whole plugin contract of aisimulate: every hook a plugin may implement.

A plugin is a module or object with functions marked ``@hookimpl`` and named after a hook below.
Distributions publish plugins through the entry-point group ``aisimulate``::

    [project.entry-points.aisimulate]
    placement = "aisimulate_placement"

The ``aisimulate_register_*`` hooks receive ``register`` and call it with provider classes; each
class carries a ``NAME`` (str), the name a payload uses to select it. Register hooks are called
once per plugin manager, when the providers of a run are resolved (``collect_registries``);
providers are then called directly, never through a hook. A provider that raises anything
but an ``AisimError``, or returns a value of the wrong shape, stops the run with one
``PluginError`` line naming the provider and the distribution that ships it
(``placement policy 'x' from my-dist 1.0: place() raised KeyError: 3``).
"""

from __future__ import annotations

import argparse
from typing import Callable

import pluggy

PROJECT_NAME = "aisimulate"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

Register = Callable[[type], None]


@hookspec
def aisimulate_register_timing_providers(register: Register) -> None:
    """Register timing providers: ``register(ProviderClass)`` for each.

    Called once when the run's providers are resolved. The engine config of the payload selects
    one by name. A provider builds, for one role
    (aggregated, prefill or decode), a timing model from its JSON config; the model answers
    ``prefill_ms(batch_size, mean_isl, mean_prefix)`` and
    ``decode_ms(batch_size, active_kv_tokens, mean_context_length, total_kv_tokens)``.
    The core registers ``fixed`` and ``polynomial``.
    """


@hookspec
def aisimulate_register_trace_formats(register: Register) -> None:
    """Register trace formats: ``register(FormatClass)`` for each.

    Called once when the run's providers are resolved. ``traffic.trace_format`` names one. A
    format subclasses ``aisimulate_core.TraceFormat`` (NAME, ``load(paths, *, trace_block_size)``)
    and parses files into the core's model, a ``Trace`` of sessions or an ``AgenticTrace``;
    the core normalizes, speeds up and drives it.
    """


@hookspec
def aisimulate_register_placement_policies(register: Register) -> None:
    """Register placement policies: ``register(PolicyClass)`` for each.

    Called once when the run's providers are resolved. ``spec.adapters.placement.provider``
    names one. A policy subclasses ``aisimulate_core.placement.PlacementPolicy`` and is built
    once per pool (the aggregated pool, or the prefill and the decode pool) as
    ``PolicyClass(config, pool)``:

    :param config: ``spec.adapters.placement.config`` (a dict; ``{}`` when absent). Keys the
        class does not list in ``CONFIG_KEYS`` are refused with their JSON path, unless it sets
        ``CONFIG_KEYS = None`` and checks them itself.
    :param pool: the live ``PoolView``: ``kind`` ("agg", "prefill", "decode"), ``block_size``
        and ``max_num_batched_tokens`` of the pool's engine, the active ``workers`` and one
        read-only ``SchedulerView`` per (worker, DP rank) in ``schedulers`` (running and
        waiting requests, active/inactive/total KV blocks, active prefill tokens, read live
        from the engine), and ``release(uuid, answer)`` for requests the policy queued.

    The runtime then calls ``place(request)`` for every request that reaches the pool, with a
    ``PlacementRequest`` (``uuid``, ``now_ms``, ``input_length``, ``block_hashes``: the
    prompt's full-block sequence hashes at the engine's block size, ``session_id``,
    ``request_id``, ``dp_rank`` asked for, ``priority``, ``strict_priority``). The answer is
    ``(worker_id, dp_rank)``, a ``Placement`` (the same with the overlap the policy saw, for
    the records' ``routing_history``) or ``QUEUED``. The notifications a policy names in its
    ``OBSERVES`` class (or instance) attribute are delivered as they happen, in the same-time
    order the module ``aisimulate_core.placement`` documents:

    * ``"kv_events"``: ``on_kv_stored(scheduler, hashes, now_ms)`` at the end of the pass that
      computed full blocks, ``on_kv_removed(scheduler, hashes, now_ms)`` when the engine
      evicted cached blocks;
    * ``"prefill"``: ``on_prefill_completed(uuid, now_ms)``;
    * ``"terminal"``: ``on_terminal(uuid, now_ms)`` (in a disaggregated prefill pool: when the
      request's KV leaves the prefill worker);
    * always: ``on_worker_ready``, ``on_worker_draining``, ``on_worker_removed`` (``WorkerView``,
      ``now_ms``) as scaling changes the pool.

    The prefill completions and terminals of one pass come one by one in the engine's running
    order. Round robin observes nothing and pays one ``place`` call per request.
    """


@hookspec
def aisimulate_register_scaling_policies(register: Register) -> None:
    """Register scaling policies: ``register(PolicyClass)`` for each.

    Called once when the run's providers are resolved. ``spec.adapters.scaling.provider``
    names one; it is built as ``PolicyClass(config)``:

    :param config: ``spec.adapters.scaling.config`` (a dict; ``{}`` when absent).

    The runtime calls ``initial_tick_ms()`` once (``math.inf``: never), then at each tick
    ``on_tick(snapshot)``, which returns ``{"target_prefill", "target_decode",
    "next_tick_ms"}``: each target the wanted number of non-draining workers of that pool (an
    int, or None to leave it alone; aggregated runs read ``target_decode``), and the next
    tick's absolute virtual time (None, or a time not after now, stops ticking). Ticks fire
    only while work remains. The snapshot has the reference's keys (``tick_ordinal``,
    ``now_ms``, ``prefill_fpm_snapshots``, ``decode_fpm_snapshots``, the active / starting /
    draining / non-draining / total counts and ids of each pool, ``traffic`` since the last
    tick) plus ``prefill_scheduler_metrics`` / ``decode_scheduler_metrics`` (the telemetry
    rows) and ``router_pending_*_requests``. The core registers ``none``, ``schedule`` and
    ``load``; an embedding program may pass any object with these two methods as
    ``run_replay(..., scaling_policy=obj)``. A policy whose class sets ``reads_pass_metrics =
    False`` (``none`` and ``schedule`` do) gets empty FPM lists, and the engines skip the
    per-pass rows it would never read. One whose class sets ``reads_snapshot = False``
    (``schedule`` does) gets only ``tick_ordinal`` and ``now_ms``: no traffic window is kept
    for it, so arrivals, placements and terminals take the paths of a run without scaling.
    """


@hookspec
def aisimulate_add_cli_options(parser: argparse.ArgumentParser) -> None:
    """Add options to ``aisimulate run``: ``parser`` is that subcommand's argparse parser.

    Called once by the CLI after plugins are loaded and before the command line is parsed;
    the plugin reads the parsed values in :func:`aisimulate_configure`.

    :param parser: the ``run`` subcommand's ``argparse.ArgumentParser``; prefix option
        names with the plugin's own (``--router-temperature``) to avoid clashes.
    """


@hookspec
def aisimulate_configure(options: argparse.Namespace, plugin_manager: pluggy.PluginManager) -> None:
    """Read the parsed command line, once, before the command runs.

    Called by the ``aisimulate`` command after it has parsed its arguments (for every
    command: ``run``, ``plugins``), in registration order. This is where a plugin reads the
    values of the options it added in :func:`aisimulate_add_cli_options` (argparse ``dest``
    names: ``--router-temperature`` is ``options.router_temperature``) and keeps them, for
    example on itself or on the provider classes it registers. Not called when the simulator
    is embedded through ``run_replay`` or ``build_simulation``: there the caller configures
    its plugin objects directly.

    :param options: the parsed arguments of the command line: the core's own options, such
        as ``options.command`` and ``options.payload``, and every plugin's. Options added to
        ``run`` exist only when ``options.command == "run"``: read them with
        ``getattr(options, "router_temperature", None)``.
    :param plugin_manager: the run's plugin manager (``get_plugin(name)``, ``list_name_plugin()``).

    Raising an ``AisimError`` stops the command with its message (exit 2); any other
    exception stops it with one line naming the plugin.
    """

"""Payload -> a ready ``Simulation``: providers resolved once, workers built, traffic lowered."""

from __future__ import annotations

from functools import partial

import attrs

from ..engine.request import SimRequest
from ..engine.timing import StepTimer, TimingContext
from ..engine import ENGINES, sglang_native
from ..engine.vllm_native import NativeVllmRank, supports
from ..engine.vllm_offload import VllmOffloadRank
from ..engine.offload_g3 import VllmG3Rank
from ..engine.vllm_native_roles import RANK_CLASSES
from ..engine.sglang_native_roles import role_class as sglang_role_class
from ..errors import ConfigError
from ..guards import (TraceFormatLookup, call_provider, check_scaling_policy, malformed,
                      scaling_policy, timing_model)
from ..kv.block_pool import BlockPool
from ..plugins import make_plugin_manager
from ..registry import registries_of
from ..report import Collector
from ..workload.lowering import build_driver
from ..workload.prompt import Prompt
from ..spec.topology import AggregatedTopology
from ..spec.validate import role_path
from .cluster import Cluster
from .disaggregated import DisaggregatedSimulation, TransferModel
from .sglang_handoff import SglangDisaggregatedSimulation
from .router import Router
from .scaling import NoScaling
from .simulation import Simulation
from .worker import Worker

_SEED_STRIDE = 1_000_003


def provider_config(tm, path):
    """(provider name, its config, the config's JSON path) of a ``timing_model``."""
    if tm.type == "external":
        # a non-object config goes to the provider as it is: the provider reports it
        config = dict(tm.config) if isinstance(tm.config, dict) else (
            {} if tm.config is None else tm.config)
        return tm.provider, config, f"{path}.rank.timing_model.config"
    config = dict(tm.params or {})
    config["type"] = tm.type
    return tm.type, config, f"{path}.rank.timing_model"


def resolve_timing(registries, role_config, role, path):
    """Build the role's timing model from its ``timing_model`` config (a registry lookup)."""
    rank = role_config.rank
    name, config, tm_path = provider_config(rank.timing_model, path)
    provider = registries.timing.provider(name)
    model = timing_model(provider, config, TimingContext(role, tm_path, rank, role_config))
    return StepTimer(model, speedup_ratio=rank.speedup_ratio,
                     decode_speedup_ratio=rank.decode_speedup_ratio, name=f"timing '{name}'")


def build_workers(role_config, timer, n_workers, callbacks, path, engine_cls=None):
    """``n_workers`` workers of ``dp_size`` ranks each; ``path`` is the role's JSON path
    (``$.spec.engine`` or ``$.spec.engine.decode``): pool and stall errors name its fields."""
    make = worker_factory(role_config, timer, callbacks, path, engine_cls)
    return [make(w, w) for w in range(n_workers)]


def worker_factory(role_config, timer, callbacks, path, engine_cls=None, role="aggregated"):
    """``make(worker_id, key)``: one worker of the role (``key``: the simulation's index;
    ``role``: aggregated, or the disaggregated prefill or decode role)."""
    rank_cfg = role_config.rank
    dp = role_config.dp_size
    native_cls = None
    if engine_cls is None:
        native, python = RANK_CLASSES[role]
        engine_cls = ENGINES[rank_cfg.backend] if role == "aggregated" else python
        if role == "aggregated" and rank_cfg.backend == "sglang":
            # the SGLang rank's pass in C where it covers the configuration
            # (engine/sglang_native.py); the Python SglangRank stays for the rest
            engine_cls = sglang_native.rank_class(rank_cfg, dp_size=dp)
        elif rank_cfg.backend == "sglang":
            # the destination-first roles, in C where the C rank covers the configuration
            # (engine/sglang_native_roles.py), else in Python (engine/sglang_roles.py)
            engine_cls = sglang_role_class(rank_cfg, role, dp_size=dp)
        elif role == "aggregated" and getattr(rank_cfg, "native_host_offload", None) is not None:
            # KV offload tiers (engine/vllm_offload.py; G3 behind G2: engine/offload_g3.py)
            engine_cls = VllmG3Rank if rank_cfg.g3_offload is not None else VllmOffloadRank
        elif role == "aggregated" and getattr(rank_cfg, "state_cache", None) is not None:
            from ..engine.vllm_state_cache import StateCacheRank
            engine_cls = StateCacheRank    # recurrent state in G1 (engine/vllm_state_cache.py)
        # the rank's pass in C where it covers the configuration (engine/vllm_native.py,
        # the roles' in vllm_native_roles.py), watched or not
        if supports(rank_cfg, dp_size=dp, role=role) is None:
            # a C rank takes this check's word (each rank's pool is checked below); another
            # class standing in for it (a test's) is made as it is
            native_cls = partial(native, supported=True) \
                if issubclass(native, NativeVllmRank) else native
    rank_path = f"{path}.rank"
    # g3_offload cluster_shared: one storage pool and lanes for all the role's workers
    storage = VllmG3Rank.shared_storage(rank_cfg) if engine_cls is VllmG3Rank else None

    def make(worker_id, key):
        ranks = []
        for d in range(dp):
            pool = BlockPool(rank_cfg.num_gpu_blocks,
                             owner=f"{rank_path}.num_gpu_blocks, worker {worker_id} dp rank {d}")
            cls = native_cls if native_cls is not None and pool.backend == "c" else engine_cls
            rank = cls(rank_cfg, timer, pool, callbacks=callbacks, worker_idx=worker_id,
                              dp_rank=d, scheduler_id=worker_id * dp + d)
            rank.config_path = rank_path
            if storage is not None:
                rank.use_storage(storage)
            ranks.append(rank)
        return Worker(key, ranks, worker_id)
    return make


def make_router(kind, provider, config, workers, role_config):
    """The router of one pool."""
    rank = role_config.rank
    return Router(kind, provider, config, workers, block_size=rank.block_size,
                  max_num_batched_tokens=getattr(rank, "max_num_batched_tokens", None))


def request_factories(requests):
    """(ready time, factory) per request of a bare spec's flat request list."""
    return [(req.arrival_time_ms, _request_factory(index, req))
            for index, req in enumerate(requests)]


def _request_factory(index, req):
    def make(now_ms):
        if req.input_token_ids is not None:
            prompt = Prompt.from_tokens(req.input_token_ids)
        else:
            # length-only requests get tokens unique to the request: no prefix sharing
            seed = (index * _SEED_STRIDE) & 0xFFFF_FFFF
            prompt = Prompt.from_tokens((seed + k) & 0xFFFF_FFFF for k in range(req.input_tokens))
        outputs = req.output_token_ids
        max_output = len(outputs) if outputs is not None else req.output_tokens
        return SimRequest(0, prompt, max_output, now_ms, request_id=req.id,
                          session_id=req.session_id, turn_index=req.turn_index,
                          metadata=req.metadata, output_token_ids=outputs, dp_rank=req.dp_rank,
                          prefill_dp_rank=req.prefill_dp_rank, priority=req.priority,
                          strict_priority=req.strict_priority)
    return make


def materialize_capacity(registries, role_config, role, path):
    """A role's rank with ``num_gpu_blocks`` estimated by its timing provider when the JSON did
    not set it explicitly (and the provider can estimate it)."""
    rank = role_config.rank
    if role_config.num_gpu_blocks_is_explicit:
        return role_config
    name, config, tm_path = provider_config(rank.timing_model, path)
    provider = registries.timing.provider(name)
    estimate = getattr(provider.cls, "estimate_num_gpu_blocks", None)
    if estimate is None:
        return role_config
    blocks = call_provider(provider, "estimate_num_gpu_blocks()", estimate, config,
                           TimingContext(role, tm_path, rank, role_config))
    if isinstance(blocks, bool) or not isinstance(blocks, int):
        raise malformed(provider, "estimate_num_gpu_blocks()", blocks, "a number of KV blocks")
    if blocks <= 0:
        raise ConfigError(f"{path}.rank.num_gpu_blocks: timing provider '{name}' estimated "
                          f"{blocks!r} KV blocks; the model does not fit this deployment")
    return attrs.evolve(role_config, rank=attrs.evolve(rank, num_gpu_blocks=blocks))


def build_simulation(payload, *, plugin_manager=None, progress=None, on_event=None,
                     scaling_policy=None):
    """A ready-to-run ``Simulation`` for a loaded ``Payload``.

    ``scaling_policy``: any object with ``initial_tick_ms()`` and ``on_tick(snapshot)`` (the
    reference's Python contract), used instead of ``spec.adapters.scaling``."""
    pm = plugin_manager if plugin_manager is not None else make_plugin_manager()
    registries = registries_of(pm)
    spec = payload.spec
    if isinstance(spec.topology, AggregatedTopology):
        sim = _build_aggregated(payload, registries, progress, on_event)
    else:
        sim = _build_disaggregated(payload, registries, progress, on_event)
    _attach_scaling(sim, payload, registries, scaling_policy)
    return sim


def _attach_scaling(sim, payload, registries, custom):
    """Scaling runs when a policy other than ``none`` is configured or one is passed in."""
    scaling = payload.spec.adapters.scaling
    if custom is None:
        provider = registries.scaling.provider(scaling.provider)
        policy = scaling_policy(provider, scaling.config or {})
        if provider.cls is NoScaling:
            return
        label = provider.label()
    else:
        policy, label = custom, f"scaling policy {type(custom).__name__}"
    check_scaling_policy(policy, label)
    topology = payload.spec.topology
    for kind, pool in sim.pools.items():
        role = topology.workers if kind == "agg" else getattr(topology, kind)
        pool.startup_delay_ms = role.startup_delay_ms
    sim.attach_cluster(Cluster(sim, policy, label, record_operations=True))


def _common(payload, registries, timers):
    """The collector (with the timing models' report extras), the workload driver and the
    placement policy's registration."""
    spec = payload.spec
    placement = registries.placement.provider(spec.adapters.placement.provider)
    collector = Collector(sla=spec.sla if spec.sla.is_set else None,
                          record_per_request=spec.record_per_request)
    for timer in timers:
        for key, value in getattr(timer.model, "report_extras", dict)().items():
            collector.add_extra(key, value)
    # the lowering looks trace formats up by name: it gets them guarded
    driver, max_in_flight = build_driver(payload, TraceFormatLookup(registries.trace_formats),
                                         request_factories=request_factories)
    return collector, driver, max_in_flight, placement


def _build_aggregated(payload, registries, progress, on_event):
    spec = payload.spec
    role = materialize_capacity(registries, spec.engine.role("aggregated"), "aggregated",
                                "$.spec.engine")
    if role.rank is not spec.engine.role("aggregated").rank:
        # KV-relative loads read the capacity the provider estimated
        spec = attrs.evolve(spec, engine=attrs.evolve(spec.engine, rank=role.rank))
        payload = attrs.evolve(payload, spec=spec)
    timer = resolve_timing(registries, role, "aggregated", "$.spec.engine")
    collector, driver, max_in_flight, placement = _common(payload, registries, [timer])
    sim = Simulation(driver=driver, collector=collector,
                     gpus_per_worker=role.dp_size * role.tensor_parallel_size,
                     max_in_flight=max_in_flight, max_sim_time_ms=payload.max_sim_time_ms,
                     on_event=on_event, progress=progress)
    make = worker_factory(role, timer, sim.events, "$.spec.engine")
    workers = [make(w, w) for w in range(spec.topology.workers.initial_workers)]
    sim.attach(workers, make_router("agg", placement, spec.adapters.placement.config or {},
                                    workers, role))
    sim.make_worker = make
    return sim


def _build_disaggregated(payload, registries, progress, on_event):
    spec = payload.spec
    roles, timers, paths = {}, {}, {}
    for stage in ("prefill", "decode"):
        # where the role was written: once evolved below, the spec names both roles
        path = paths[stage] = role_path(spec.engine, stage, "$.spec.engine")
        backend = spec.engine.role(stage).rank.backend
        if backend not in ("vllm", "trtllm", "sglang"):  # loaded without the support check
            raise ConfigError(f"{path}.rank.backend: '{backend}' is not supported yet in a "
                              "disaggregated topology")
        roles[stage] = materialize_capacity(registries, spec.engine.role(stage), stage, path)
        timers[stage] = resolve_timing(registries, roles[stage], stage, path)
    # KV-relative loads read the decode pool's capacity, as a provider may have estimated it
    spec = attrs.evolve(spec, engine=attrs.evolve(spec.engine, **roles))
    payload = attrs.evolve(payload, spec=spec)
    collector, driver, max_in_flight, placement = _common(
        payload, registries, [timers["prefill"], timers["decode"]])
    prefill, decode = roles["prefill"], roles["decode"]
    topology = spec.topology
    # SGLang hands off destination-first (runtime/sglang_handoff.py)
    sim_cls = SglangDisaggregatedSimulation if prefill.rank.backend == "sglang" else \
        DisaggregatedSimulation
    sim = sim_cls(
        transfer=TransferModel(prefill.rank, topology.handoff_latency_ms),
        prefill_gpus_per_worker=prefill.dp_size * prefill.tensor_parallel_size,
        driver=driver, collector=collector,
        gpus_per_worker=decode.dp_size * decode.tensor_parallel_size,
        max_in_flight=max_in_flight, max_sim_time_ms=payload.max_sim_time_ms,
        on_event=on_event, progress=progress)
    pools = {}
    sim.make_workers = {}
    for stage, pool in (("prefill", topology.prefill), ("decode", topology.decode)):
        make = sim.make_workers[stage] = worker_factory(roles[stage], timers[stage], sim.events,
                                                        paths[stage], role=stage)
        first = sum(len(p) for p in pools.values())
        pools[stage] = [make(w, first + w) for w in range(pool.initial_workers)]
    config = spec.adapters.placement.config or {}
    sim.attach_pools(pools["prefill"], pools["decode"],
                     make_router("prefill", placement, config, pools["prefill"], roles["prefill"]),
                     make_router("decode", placement, config, pools["decode"], roles["decode"]))
    return sim

"""Payload -> a ready ``Simulation``: providers resolved once, workers built, traffic lowered."""

from __future__ import annotations

from ..engine.request import SimRequest
from ..engine.timing import StepTimer, TimingContext
from ..engine.vllm import VllmRank
from ..kv.block_pool import BlockPool
from ..plugins import make_plugin_manager
from ..registry import collect_registries
from ..report import Collector
from ..workload.driver import TimedDriver
from ..workload.prompt import Prompt
from .simulation import Simulation, aggregated_pool_view
from .worker import Worker

_SEED_STRIDE = 1_000_003


def resolve_timing(registries, role_config, role, path):
    """Build the role's timing model from its ``timing_model`` config (a registry lookup)."""
    rank = role_config.rank
    tm = rank.timing_model
    if tm.type == "external":
        name = tm.provider
        config = dict(tm.config or {})
        tm_path = f"{path}.rank.timing_model.config"
    else:
        name = tm.type
        config = dict(tm.params or {})
        config["type"] = tm.type
        tm_path = f"{path}.rank.timing_model"
    provider = registries.timing.get(name)
    model = provider.from_config(config, TimingContext(role, tm_path, rank, role_config))
    return StepTimer(model, speedup_ratio=rank.speedup_ratio,
                     decode_speedup_ratio=rank.decode_speedup_ratio, name=f"timing '{name}'")


def build_workers(role_config, timer, n_workers, callbacks):
    rank_cfg = role_config.rank
    dp = role_config.dp_size
    workers = []
    for w in range(n_workers):
        ranks = [VllmRank(rank_cfg, timer, BlockPool(rank_cfg.num_gpu_blocks), callbacks=callbacks,
                          worker_idx=w, dp_rank=d, scheduler_id=w * dp + d) for d in range(dp)]
        workers.append(Worker(w, ranks))
    return workers


def request_driver(requests):
    """Flat request list of a bare spec: each request is ready at its ``arrival_time_ms``."""
    factories = []
    for index, spec_request in enumerate(requests):
        factories.append((spec_request.arrival_time_ms, _request_factory(index, spec_request)))
    return TimedDriver(factories)


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
                          metadata=req.metadata, output_token_ids=outputs, dp_rank=req.dp_rank)
    return make


def build_simulation(payload, *, plugin_manager=None, progress=None, on_event=None):
    """A ready-to-run ``Simulation`` for a loaded ``Payload``."""
    pm = plugin_manager if plugin_manager is not None else make_plugin_manager()
    registries = collect_registries(pm)
    spec = payload.spec
    role = spec.engine.role("aggregated")
    timer = resolve_timing(registries, role, "aggregated", "$.spec.engine")
    placement_cls = registries.placement.get(spec.adapters.placement.provider)
    registries.scaling.get(spec.adapters.scaling.provider)(spec.adapters.scaling.config or {})
    n_workers = spec.topology.workers.initial_workers
    collector = Collector(sla=spec.sla if spec.sla.is_set else None,
                          record_per_request=spec.record_per_request)
    max_in_flight = spec.max_in_flight
    traffic = payload.traffic
    if traffic is None:
        driver = request_driver(spec.requests)
    elif traffic.source_type in ("synthetic", "synthetic-session"):
        from ..spec import resolve_synthetic
        from ..workload.synthetic import synthetic_driver
        resolved = resolve_synthetic(traffic, spec)
        driver = synthetic_driver(resolved)
        max_in_flight = None  # the driver's session cap is the closed loop
    else:
        fmt = registries.trace_formats.get(traffic.trace_format)
        driver = fmt.build_driver(traffic, spec, registries)
        max_in_flight = None
    sim = Simulation(driver=driver, collector=collector,
                     gpus_per_worker=role.dp_size * role.tensor_parallel_size,
                     max_in_flight=max_in_flight, max_sim_time_ms=payload.max_sim_time_ms,
                     on_event=on_event, progress=progress)
    workers = build_workers(role, timer, n_workers, sim.events)
    placement = placement_cls(spec.adapters.placement.config or {}, aggregated_pool_view(workers))
    sim.attach(workers, placement)
    return sim



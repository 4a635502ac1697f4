"""The kv_router in C (csrc/kv_router.c, plugins/placement's kv_router_native.py) against its
Python twin (kv_router.py's KvRouter): seeded random streams of placements and notifications
give the same decisions (chosen scheduler, every candidate's cost, overlaps), the same queue
release order and the same held requests; whole random simulations give the same records with
the C router as with the Python one on the same C ranks (the engine-index overlap in C)."""

from __future__ import annotations

import json
import random

import pytest

from aisimulate_core import native, run_replay
from aisimulate_core.errors import AisimError
from aisimulate_core.placement import QUEUED, PlacementRequest, PoolView, SchedulerView, WorkerView
from aisimulate_placement import KvRouter
from aisimulate_placement import kv_router as kv_router_module
from aisimulate_placement.kv_router_config import settings_for_pool
from aisimulate_placement.kv_router_native import NativeKvRouter

pytestmark = pytest.mark.skipif(native.lib is None, reason="the C core is not built")

BLOCK_SIZE = 16


def chain(ids):
    return [hash(tuple(ids[: i + 1])) & 0xFFFF_FFFF_FFFF_FFFF for i in range(len(ids))]


class Side:
    """One router (C or Python) on its own pool view, driven through the placement contract."""

    def __init__(self, config, kind, native_pool, workers, dp_size, budget):
        self.released = []
        self.pool = PoolView(kind, block_size=BLOCK_SIZE, max_num_batched_tokens=budget,
                             release=lambda uuid, answer: self.released.append(
                                 (uuid, answer.worker_id, answer.dp_rank, answer.overlap_blocks,
                                  answer.best_overlap_blocks)),
                             native=native_pool)
        self.dp_size = dp_size
        self.worker_ids = list(workers)
        self.refresh()
        # the C router built directly: the comparison runs on either backend
        self.router = (NativeKvRouter(config, self.pool, settings_for_pool(config, kind))
                       if native_pool else KvRouter(config, self.pool))
        self.router.decisions = []

    def refresh(self):
        dp = self.dp_size
        self.pool.workers = tuple(WorkerView(w, dp) for w in self.worker_ids)
        self.pool.schedulers = tuple(SchedulerView(None, w, rank, w * dp + rank)
                                     for w in self.worker_ids for rank in range(dp))


def random_config(rng):
    config = {}
    if rng.random() < 0.5:
        config["overlap_score_credit"] = rng.choice([0.0, 0.5, 1.0, 1.25, 2.0])
    if rng.random() < 0.5:
        config["prefill_load_scale"] = rng.choice([0.0, 0.75, 1.0, 3.0])
    if rng.random() < 0.2:
        config["overlap_score_weight"] = rng.choice([0, 0.5, 2.0])
    if rng.random() < 0.4:
        config["overlap_score_credit_decay"] = rng.choice([0.5, 2.0, 7.0])
    if rng.random() < 0.4:
        config["decode_active_request_weight"] = rng.choice([0.25, 1.0, 3.0])
    for key in ("router_track_active_blocks", "router_assume_kv_reuse",
                "router_track_prefill_tokens"):
        if rng.random() < 0.25:
            config[key] = False
    if rng.random() < 0.5:
        config["router_queue_threshold"] = rng.choice([0, 0.005, 0.02, 0.1, 1])
        config["router_queue_policy"] = rng.choice(["fcfs", "lcfs", "wspt"])
    if rng.random() < 0.4:
        config["kv_event_lag_ms"] = rng.choice([0.5, 1.5, 10.0])
    return config


def drive(seed):
    """A random scenario on both sides; asserts they agree after every step."""
    rng = random.Random(seed)
    config = random_config(rng)
    kind = rng.choice(["agg", "agg", "prefill", "decode"])
    dp_size = rng.choice([1, 1, 2])
    workers = list(range(rng.randint(1, 3)))
    budget = rng.choice([None, 512, 8192])
    sides = [Side(config, kind, flag, workers, dp_size, budget) for flag in (True, False)]
    assert type(sides[0].router) is NativeKvRouter and type(sides[1].router) is KvRouter
    prefixes = [[rng.randrange(1000) for _ in range(rng.randint(1, 12))] for _ in range(6)]
    t = 0.0
    next_uuid = 0
    placed, in_prefill = [], []
    next_worker = len(workers)
    for _ in range(rng.randint(20, 120)):
        t += rng.choice([0.0, 0.25, 1.0, 3.0])
        op = rng.random()
        if op < 0.4 or not placed:
            ids = list(rng.choice(prefixes)) + [rng.randrange(10**6)
                                                for _ in range(rng.randint(0, 8))]
            isl = rng.randint(0, len(ids) * BLOCK_SIZE + BLOCK_SIZE - 1)
            hashes = chain(ids[: isl // BLOCK_SIZE])
            priority, strict = rng.choice([0, 0, 1, 5, -2]), rng.choice([0, 0, 0, 1])
            answers = []
            for side in sides:
                if not side.pool.schedulers and "router_queue_threshold" not in config:
                    answers.append("none")
                    continue
                answer = side.router.place(PlacementRequest(
                    next_uuid, None, isl, None, now_ms=t, priority=priority,
                    strict_priority=strict, block_hashes=hashes))
                answers.append(answer if answer is QUEUED else
                               (answer.worker_id, answer.dp_rank, answer.overlap_blocks,
                                answer.best_overlap_blocks))
            assert answers[0] == answers[1], (seed, next_uuid)
            placed.append(next_uuid)
            in_prefill.append(next_uuid)
            next_uuid += 1
        elif op < 0.6:
            schedulers = sides[0].pool.schedulers
            if schedulers:
                view = rng.choice(schedulers)
                ids = list(rng.choice(prefixes))[: rng.randint(1, 12)]
                stored = rng.random() < 0.7
                hashes = chain(ids) if stored else chain(ids)[rng.randrange(len(ids)):]
                for side in sides:
                    target = side.pool.scheduler(view.worker_id, view.dp_rank)
                    if stored:
                        side.router.on_kv_stored(target, hashes, t)
                    else:
                        side.router.on_kv_removed(target, hashes, t)
        elif op < 0.75 and in_prefill:
            uuid = in_prefill.pop(rng.randrange(len(in_prefill)))
            for side in sides:
                side.router.on_prefill_completed(uuid, t)
        elif op < 0.9:
            uuid = placed.pop(rng.randrange(len(placed)))
            if uuid in in_prefill:
                in_prefill.remove(uuid)
            for side in sides:
                side.router.on_terminal(uuid, t)
        else:
            change = rng.choice(["ready", "draining", "removed"])
            worker_id = next_worker if change == "ready" else rng.choice(workers or [0])
            if change == "ready":
                next_worker += 1
            for side in sides:
                if change == "ready":
                    side.worker_ids = sorted(side.worker_ids + [worker_id])
                elif worker_id in side.worker_ids:
                    side.worker_ids.remove(worker_id)
                side.refresh()
                method = getattr(side.router, f"on_worker_{change}")
                method(WorkerView(worker_id, dp_size), t)
            if change == "ready":
                workers.append(worker_id)
            elif worker_id in workers:
                workers.remove(worker_id)
        c, py = sides
        assert c.released == py.released, (seed, t)
        assert c.router.queued_uuids() == py.router.queued_uuids(), (seed, t)
        assert c.router.last_costs == py.router.last_costs, (seed, t)
    c, py = sides
    assert c.router.decisions == py.router.decisions, seed
    return len(c.router.decisions), len(c.released)


def test_random_streams_decide_alike_in_c_and_in_python():
    decisions = releases = 0
    for seed in range(300):
        made, released = drive(seed)
        decisions += made
        releases += released
    # the streams exercised the decisions and the queue's releases
    assert decisions > 3000 and releases > 100


on_c_backend = pytest.mark.skipif(native.BACKEND != "c",
                                  reason="AISIMULATE_BACKEND=python: the Python router runs")


@on_c_backend
def test_the_c_router_stands_in_only_where_it_decides_alike():
    pool = PoolView("agg", native=True)
    assert type(KvRouter({}, pool)) is NativeKvRouter
    assert type(KvRouter({"router_temperature": 0.5}, pool)) is KvRouter
    assert type(KvRouter({}, PoolView("agg"))) is KvRouter   # a hand-made view: Python


def test_the_python_backend_keeps_the_python_router(monkeypatch):
    monkeypatch.setattr(native, "BACKEND", "python")
    assert type(KvRouter({}, PoolView("agg", native=True))) is KvRouter


# ---------------------------------------------------------------------- whole simulations

def random_payload(rng, trace_path):
    conversations = []
    prefixes = [[rng.randrange(10**6) for _ in range(rng.randint(1, 20))] for _ in range(5)]
    t = 0
    for _ in range(rng.randint(20, 60)):
        t += rng.choice([0, 1, 5, 20])
        ids = list(rng.choice(prefixes))[: rng.randint(1, 20)] + \
            [rng.randrange(10**6) for _ in range(rng.randint(0, 6))]
        conversations.append({"timestamp": t, "input_length": len(ids) * 16 - rng.randint(0, 15),
                              "output_length": rng.randint(1, 30), "hash_ids": ids})
    trace_path.write_text("".join(json.dumps(row) + "\n" for row in conversations))
    config = random_config(rng)
    config.pop("kv_event_lag_ms", None) if rng.random() < 0.5 else None
    disaggregated = rng.random() < 0.3
    rank = {"backend": "vllm", "block_size": 16,
            "num_gpu_blocks": rng.choice([40, 64, 200, 2000]),
            "max_num_seqs": rng.choice([4, 16, 128]),
            "max_num_batched_tokens": rng.choice([256, 1024, 8192]),
            "enable_chunked_prefill": rng.random() < 0.5,
            "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 5.0}}
    topology = ({"kind": "disaggregated", "prefill": {"initial_workers": rng.randint(1, 3)},
                 "decode": {"initial_workers": rng.randint(1, 2)}} if disaggregated else
                {"kind": "aggregated", "workers": {"initial_workers": rng.randint(1, 4)}})
    return {"spec": {"version": 1, "topology": topology,
                     "engine": {"dp_size": rng.choice([1, 1, 2]), "tensor_parallel_size": 1,
                                "rank": rank},
                     "adapters": {"placement": {"provider": "kv_router", "config": config},
                                  "scaling": {"provider": "none"}},
                     "record_per_request": True},
            "traffic": {"source_type": "trace", "trace_path": str(trace_path),
                        "trace_format": "mooncake", "trace_block_size": 16}}


def outcome(payload):
    """The summary (wall times aside) and the records (their random uuids aside)."""
    try:
        report = run_replay(json.dumps(payload))
    except AisimError as error:   # (a queue no worker will ever take, say): the same line
        return str(error)
    summary = {key: value for key, value in report.summary.items()
               if "wall" not in key and not key.startswith("processed_")}   # (per wall second)
    records = [{key: value for key, value in record.items() if key != "uuid"}
               for record in report.per_request]
    return summary, records


@on_c_backend
def test_random_simulations_give_the_same_records_with_the_c_router(tmp_path, monkeypatch):
    built = []
    original = NativeKvRouter.__init__

    def counting(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(NativeKvRouter, "__init__", counting)
    completed = 0
    for seed in range(80):
        rng = random.Random(1000 + seed)
        payload = random_payload(rng, tmp_path / f"trace_{seed}.jsonl")
        c_side = outcome(payload)
        with monkeypatch.context() as python_router:
            python_router.setattr(kv_router_module, "native_refusal",
                                  lambda settings, pool: "the test's Python side")
            before = len(built)
            python_side = outcome(payload)
            assert len(built) == before   # (the Python router ran)
        assert c_side == python_side, seed
        completed += not isinstance(c_side, str)
    assert completed >= 60
    # the C router ran in each pool, reading the C ranks' own index in some
    assert len(built) >= 80
    assert any(router._engine_index and router._given is None for router in built)   # the C router ran, in each pool


@on_c_backend
def test_on_python_ranks_the_c_router_takes_their_overlaps(tmp_path, monkeypatch):
    """Ranks the C rank declines (the Python VllmRank on the C backend) answer the engine index
    in Python; the C router gets those overlaps and decides as the Python router."""
    from aisimulate_core.runtime import build

    monkeypatch.setattr(build, "supports", lambda *args, **kwargs: "the test's Python ranks")
    built = []
    original = NativeKvRouter.__init__

    def counting(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(NativeKvRouter, "__init__", counting)
    for seed in range(20):
        payload = random_payload(random.Random(2000 + seed), tmp_path / f"trace_{seed}.jsonl")
        c_side = outcome(payload)
        with monkeypatch.context() as python_router:
            python_router.setattr(kv_router_module, "native_refusal",
                                  lambda settings, pool: "the test's Python side")
            assert outcome(payload) == c_side, seed
    assert any(router._given is not None for router in built)

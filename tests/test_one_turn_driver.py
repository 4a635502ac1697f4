"""One-turn synthetic traffic's driver (workload/one_turn.py) against the session driver.

``OneTurnDriver`` makes each request straight from its (ready time, session index); the
session driver over ``SyntheticSessions`` is the general path it must equal to the bit: the
same requests (names, prompts' id ranges and ids, ready times, lengths) and the same reports,
over seeded random synthetic payloads (load types, rates, arrival seeds, prefix groups, request
counts, concurrency and in-flight caps).
"""

import json
import random

import pytest

from aisimulate_core import build_simulation, load_payload, run_replay
from aisimulate_core.spec import resolve_synthetic
from aisimulate_core.workload import synthetic
from aisimulate_core.workload.one_turn import OneTurnDriver
from aisimulate_core.workload.sessions import SessionDriver
from reference import HOST_KEYS


def random_payload(rng):
    load = rng.choice(["poisson", "constant_rate", "concurrency", "kv_capacity_fraction"])
    traffic = {"source_type": "synthetic", "load_type": load,
               "isl": rng.choice([1, 15, 16, 64, 100, 333]), "osl": rng.randint(1, 12),
               "request_count": rng.randint(1, 160), "arrival_seed": rng.randint(0, 2**32)}
    if load == "poisson":
        traffic["request_rate"] = rng.choice([5.0, 80.0, 400.0, 3000.0])
    elif load == "constant_rate":
        if rng.random() < 0.5:
            traffic["request_rate"] = rng.choice([10.0, 250.0, 1000.0])
        else:
            traffic["arrival_interval_ms"] = rng.choice([0.5, 3.0, 20.0])
    elif load == "concurrency":
        traffic["concurrency"] = rng.randint(1, 40)
    else:
        traffic["kv_load_ratio"] = rng.choice([0.01, 0.1, 0.5])
    if load in ("poisson", "constant_rate") and rng.random() < 0.3:
        traffic["concurrency"] = rng.randint(1, 20)
    if rng.random() < 0.6:
        traffic["shared_prefix_ratio"] = rng.choice([0.1, 0.25, 0.5, 0.9, 1.0])
        traffic["num_prefix_groups"] = rng.choice([1, 3, 17])
    spec = {"version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
            "engine": {"rank": {"backend": rng.choice(["vllm", "sglang"]), "block_size": 16,
                                "num_gpu_blocks": rng.choice([64, 512, 4096]),
                                "max_num_seqs": rng.choice([4, 64]),
                                "timing_model": {"type": "fixed", "prefill_ms": 3.0,
                                                 "decode_ms": 1.5}}},
            "record_per_request": True}
    if rng.random() < 0.2:
        spec["max_in_flight"] = rng.randint(1, 30)
    return {"spec": spec, "traffic": traffic}


PAYLOADS = [random_payload(random.Random(seed)) for seed in range(40)]


def resolved(payload):
    loaded = load_payload(json.dumps(payload))
    return resolve_synthetic(loaded.traffic, loaded.spec)


def one_turn(res):
    sessions = synthetic.SyntheticTrace(res).sessions
    return OneTurnDriver(sessions, max_sessions=res.max_in_flight,
                         session_metadata=sessions.grouped)


SYNTHETIC_DRIVER = synthetic.synthetic_driver


def general(res):
    return SYNTHETIC_DRIVER(res, general=True)


def drain(driver, rng):
    """Every request the driver hands out, each completing (or, now and then, rejected)
    after a random 0..2 ms, at most a random number popped at a time."""
    out, pending = [], []
    t = 0.0
    while not driver.is_drained() or pending:
        ready = driver.next_ready_ms()
        if pending and (pending[0][0] <= ready):
            end, r, status = pending.pop(0)
            t = max(t, end)
            driver.on_terminal(r, t, status)
            continue
        t = max(t, ready)
        for r in driver.pop_ready(t, rng.randint(1, 5)):
            ids, block = r.prompt._source
            out.append((r.uuid, r.session_id, r.turn_index, r.arrival_ms, r.max_output,
                        r.prompt_len, r.output_token_ids, r.priority, r.strict_priority,
                        ids.ranges, block, r.prompt.values.tolist(), r.prompt.lengths.tolist()))
            r.generated = r.max_output
            pending.append((t + rng.choice([0.0, 0.5, 2.0]), r,
                            "rejected" if rng.random() < 0.1 else "completed"))
            pending.sort(key=lambda p: p[0])
    return out


@pytest.mark.parametrize("index", range(len(PAYLOADS)))
def test_one_turn_driver_hands_out_the_session_drivers_requests(index):
    res = resolved(PAYLOADS[index])
    fast, slow = one_turn(res), general(res)
    assert isinstance(slow, SessionDriver) and fast.total == slow.total
    assert fast.session_metadata == slow.session_metadata
    assert drain(fast, random.Random(index)) == drain(slow, random.Random(index))


@pytest.mark.parametrize("index", range(0, len(PAYLOADS), 2))
def test_one_turn_driver_gives_the_session_drivers_report(index, monkeypatch):
    payload = json.dumps(PAYLOADS[index])
    monkeypatch.setattr(synthetic, "synthetic_driver", one_turn)
    fast = run_replay(payload).to_dict()
    monkeypatch.setattr(synthetic, "synthetic_driver", general)
    slow = run_replay(payload).to_dict()
    for report in (fast, slow):   # the host's clock, not the run's
        for key in HOST_KEYS:
            report.pop(key)
    assert fast == slow
    assert fast["per_request"]


def test_the_fresh_ids_wrap_as_in_the_session_driver():
    # 2^32 ids leave room for only a few turns of fresh blocks after the groups
    payload = random_payload(random.Random(0))
    payload["traffic"].update(load_type="concurrency", concurrency=3, request_count=40,
                              isl=16 * 50, shared_prefix_ratio=0.5,
                              num_prefix_groups=(2**32 - 25 * 7) // 25)
    res = resolved(payload)
    fast, slow = one_turn(res), general(res)
    requests = drain(fast, random.Random(1))
    assert requests == drain(slow, random.Random(1))
    assert any(len(r[9]) == 3 for r in requests)   # prefix, then a fresh range split in two


def test_one_turn_traffic_without_groups_takes_the_one_turn_driver():
    payload = random_payload(random.Random(3))
    payload["traffic"].update(load_type="poisson", request_rate=100.0, request_count=50,
                              shared_prefix_ratio=0.0)
    payload["traffic"].pop("concurrency", None)
    payload["spec"].pop("max_in_flight", None)
    sim = build_simulation(load_payload(json.dumps(payload)))
    assert isinstance(sim.driver, OneTurnDriver) and sim.driver.max_sessions is None
    sim.run()
    assert sim.report().summary["completed_requests"] + \
        sim.report().summary.get("rejected_requests", 0) == 50
    # several turns a session: the session driver
    payload["traffic"].update(source_type="synthetic-session", turns_per_session=2)
    assert isinstance(build_simulation(load_payload(json.dumps(payload))).driver, SessionDriver)


def test_sessions_ready_out_of_index_order_keep_their_own_group_draws():
    # terminals told at falling times ready later sessions first: each still gets the
    # group choice the session driver draws for it (the i-th draw for session i)
    payload = random_payload(random.Random(5))
    payload["traffic"].update(load_type="concurrency", concurrency=4, request_count=30,
                              shared_prefix_ratio=0.5, num_prefix_groups=9)
    res = resolved(payload)
    seen = []
    for driver in (one_turn(res), general(res)):
        out, clock = [], 1000.0
        while not driver.is_drained():
            batch = list(driver.pop_ready(driver.next_ready_ms(), 2))
            for r in batch:
                out.append((r.session_id, r.arrival_ms, r.prompt._source[0].ranges))
            for r in batch:
                clock -= 1.0
                driver.on_terminal(r, clock, "completed")
        seen.append(out)
    assert seen[0] == seen[1]
    names = [name for name, _, _ in seen[0]]
    assert names != sorted(names, key=lambda n: int(n.split("_")[1]))  # out of index order

"""The disaggregated loop's shortcut (runtime/disaggregated.py ``_absorb_transfers``): a KV
transfer that completes while its decode worker's pass is in flight, before anything else
happens, is not a step of its own. Its time still counts as visited (worker-seconds sum over
every visited time) and its activation waits for that pass end, exactly as a step there would
do, so the run is the same, request for request and to the bit: on b5's shape and on seeded
random deployments (KV router, pressure, concurrency caps), against the same runs stepped at
every time. Worker-seconds add each advance between distinct visited times once, however often
a time was visited."""

import json

import pytest

from aisimulate_core import Prompt, SimRequest, build_simulation, load_payload
from reference import HOST_KEYS

# b5's shape (1 prefill, 2 decode, fixed timing), short: a transfer takes 4.194304 ms, less than
# a decode pass (5 ms), so it completes inside the destination's pass in flight
PAYLOAD = {
    "spec": {
        "version": 1,
        "topology": {"kind": "disaggregated", "prefill": {"initial_workers": 1},
                     "decode": {"initial_workers": 2}},
        "engine": {"rank": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 4096,
                            "max_num_seqs": 64, "max_num_batched_tokens": 8192,
                            "timing_model": {"type": "fixed", "prefill_ms": 10.0,
                                             "decode_ms": 5.0},
                            "kv_transfer_bandwidth": 64.0, "kv_bytes_per_token": 131072}},
        "record_per_request": True,
    },
    "traffic": {"source_type": "synthetic", "load_type": "poisson", "request_rate": 40.0,
                "isl": 2048, "osl": 24, "request_count": 40},
}
TRANSFER_MS = 2048 * 131072 / (64.0 * 1e9) * 1000.0


def build(telemetry=False, **spec):
    doc = json.loads(json.dumps(PAYLOAD))
    doc["spec"].update(spec)
    sim = build_simulation(load_payload(json.dumps(doc)))
    if telemetry:
        # a sampled run visits every transfer time as a step (the shortcut stays off), and
        # sampling never changes a run: the reference to compare with
        sim.sample_telemetry(1e9, lambda sample: None)
    return sim, count_steps(sim)


def count_steps(sim):
    """The times ``sim`` runs a step at, as it goes."""
    steps = []
    step = sim._step

    def counted(t):
        steps.append(t)
        step(t)

    sim._step = counted
    return steps


def comparable(report):
    summary = {k: v for k, v in report.summary.items() if k not in HOST_KEYS}
    return summary, report.per_request


def transfer_times(report):
    return {r["destination_reserved_ms"] + TRANSFER_MS for r in report.per_request}


def test_a_transfer_into_a_pass_in_flight_is_not_a_step_and_changes_nothing():
    sim, steps = build()
    sim.run()
    report = sim.report()
    stepped, stepped_steps = build(telemetry=True)
    stepped.run()
    reference = stepped.report()
    assert comparable(report) == comparable(reference)
    skipped = set(stepped_steps) - set(steps)
    assert skipped and skipped <= transfer_times(reference)
    assert set(steps) <= set(stepped_steps)
    # the skipped times are visited all the same: worker-seconds add every clock advance
    assert set(sim._visited) == set(stepped._visited)
    assert report.summary["decode_worker_seconds"] == reference.summary["decode_worker_seconds"]


def test_the_shortcut_stays_within_each_run_until():
    """An embedder stopping the clock at, just before and just after each transfer time gets
    the run it gets in one call."""
    whole, _ = build()
    whole.run()
    expected = comparable(whole.report())
    stops = set()
    for t in transfer_times(whole.report()):
        stops.update((t - 1e-6, t, t + 1e-6))
    sim, _ = build()
    for t in sorted(stops):
        sim.run_until(t)
        assert sim.now_ms == t
    sim.run()
    assert comparable(sim.report()) == expected


def skipped_times():
    """Transfer times the shortcut visits without a step, and every time visited."""
    sim, steps = build()
    sim.run()
    stepped, stepped_steps = build(telemetry=True)
    stepped.run()
    return sorted(set(stepped_steps) - set(steps)), sorted(set(sim._visited))


def test_a_run_cut_off_before_a_transfer_completes_never_visits_it():
    skipped, visited = skipped_times()
    # a skipped transfer time well clear of the time visited before it: the cutoff falls between
    t = next(t for t in skipped if t - visited[visited.index(t) - 1] > 1e-3)
    cut, _ = build(max_sim_time_ms=t - 1e-6)
    cut.run()
    stepped, _ = build(telemetry=True, max_sim_time_ms=t - 1e-6)
    stepped.run()
    assert t not in cut._visited
    assert comparable(cut.report()) == comparable(stepped.report())


# ---------------------------------------------------------------- seeded random deployments
def random_payload(seed):
    """A small disaggregated deployment and workload drawn from ``seed``: pool sizes, timing,
    transfer speed (some transfers shorter than a decode pass, some longer), KV pressure,
    placement (round robin or the KV router), shared prefixes, a concurrency cap."""
    import random

    rng = random.Random(seed)
    rank = {"backend": rng.choice(["vllm", "trtllm"]), "block_size": 16,
            "num_gpu_blocks": rng.choice([160, 400, 4096]),
            "max_num_seqs": rng.choice([4, 16, 64]),
            "max_num_batched_tokens": rng.choice([512, 8192]),
            "timing_model": rng.choice([
                {"type": "fixed", "prefill_ms": rng.choice([3.0, 10.0]),
                 "decode_ms": rng.choice([2.5, 5.0])},
                {"type": "polynomial"}]),
            "kv_transfer_bandwidth": rng.choice([16.0, 64.0, 400.0]),
            "kv_bytes_per_token": 131072,
            "kv_transfer_timing_mode": rng.choice(["full_prompt", "destination_missing"])}
    placement = rng.choice([{"provider": "round_robin"},
                            {"provider": "kv_router", "config": {"overlap_score_credit": 0.5}}])
    traffic = {"source_type": "synthetic", "load_type": "poisson",
               "request_rate": rng.choice([20.0, 60.0, 200.0]),
               "isl": rng.choice([100, 600, 2048]), "osl": rng.choice([1, 8, 40]),
               "request_count": rng.choice([20, 40]), "arrival_seed": seed,
               "shared_prefix_ratio": rng.choice([0.0, 0.5]), "num_prefix_groups": 2}
    if rng.random() < 0.3:
        traffic["concurrency"] = rng.choice([2, 8])
    return {
        "spec": {"version": 1,
                 "topology": {"kind": "disaggregated",
                              "prefill": {"initial_workers": rng.choice([1, 2])},
                              "decode": {"initial_workers": rng.choice([1, 2, 3])}},
                 "engine": {"rank": rank},
                 "adapters": {"placement": placement, "scaling": {"provider": "none"}},
                 "record_per_request": True},
        "traffic": traffic,
    }


def run_counted(doc, telemetry=False):
    sim = build_simulation(load_payload(json.dumps(doc)))
    if telemetry:
        sim.sample_telemetry(1e9, lambda sample: None)   # the shortcut off, nothing else
    steps = count_steps(sim)
    sim.run()
    return sim, steps


@pytest.mark.parametrize("seed", range(12))
def test_random_deployments_run_the_same_with_and_without_the_shortcut(seed):
    doc = random_payload(seed)
    sim, steps = run_counted(doc)
    stepped, stepped_steps = run_counted(doc, telemetry=True)
    assert comparable(sim.report()) == comparable(stepped.report())
    assert set(sim._visited) == set(stepped._visited)
    assert set(steps) <= set(stepped_steps)


def test_the_shortcut_skips_steps_in_some_random_deployments():
    """(The comparison above is not vacuous: the drawn deployments do hit the shortcut.)"""
    skipped = 0
    for seed in range(12):
        sim, steps = run_counted(random_payload(seed))
        skipped += len(sim._visited) - len(steps)
    assert skipped > 0


# ---------------------------------------------------------------- worker-seconds
def distinct_time_seconds(sim):
    """Each pool's worker count times every advance between the distinct visited times and
    pass ends, added left to right: what the report's worker-seconds are."""
    times = sorted(set(sim._visited).union(
        *(rank.pass_ends for worker in sim.workers for rank in worker.ranks)))
    prefill = decode = 0.0
    last = 0.0
    for t in times:
        prefill += len(sim.prefill_workers) * (t - last) / 1000.0
        decode += len(sim.decode_workers) * (t - last) / 1000.0
        last = t
    return prefill, decode


def test_worker_seconds_count_a_time_visited_twice_once():
    """An embedder stopping the clock at each arrival and submitting a request there makes the
    loop visit times again (the placement of a submission is a step at the same time); the
    worker-seconds still add each advance once, to the bit."""
    sim, _ = build()
    stops = [5.0 * i for i in range(1, 30)]
    for i, t in enumerate(stops):
        sim.run_until(t)
        sim.submit(SimRequest(0, Prompt.from_tokens(range(1000 + 64 * i, 1000 + 64 * i + 48)),
                              3, 0.0, request_id=f"ext{i}"))
    sim.run()
    assert len(sim._visited) > len(set(sim._visited))
    summary = sim.report().summary
    prefill, decode = distinct_time_seconds(sim)
    assert summary["prefill_worker_seconds"] == prefill
    assert summary["decode_worker_seconds"] == decode

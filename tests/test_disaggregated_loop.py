"""The disaggregated loop's shortcut (runtime/disaggregated.py ``_absorb_transfers``): a KV
transfer that completes while its decode worker's pass is in flight, before anything else
happens, is not a step of its own. Its time still counts as visited (worker-seconds sum over
every visited time) and its activation waits for that pass end, exactly as a step there would
do, so the run is the same, request for request and to the bit."""

import json

from aisimulate_core import build_simulation, load_payload
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
    steps = []
    step = sim._step

    def counted(t):
        steps.append(t)
        step(t)

    sim._step = counted
    return sim, steps


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

"""The kv_router's decisions against the reference's logits (CLUSTER.md §2.3–§2.6, §2.8, §2.9).

Each scenario feeds the router the notifications the reference's engine produced at the times
the examples give, and compares the logit of every decision with the reference's.
"""

import math

import pytest

from aisimulate_core.errors import SimulationError
from aisimulate_core.placement import QUEUED, Placement
from aisimulate_core.plugins import make_plugin_manager
from aisimulate_core.registry import collect_registries
from aisimulate_placement import KvAware, KvRouter, LeastLoaded
from test_kv_router_harness import Cluster


def five_requests(config=None, lag_events=True):
    """The five-request trace of §2.3 on one worker, bs 16 (fixed timing: prefill 10 ms).

    #1 (1,2,3,4; 64) at 0, its prefill pass ends at 10 and stores 1..4; #2 (1,2,5,6; 64) at 1,
    prefilled by the pass ending at 25 (stores 1,2,5,6); #3 (1,2,3,4,7; 70) at 12 and
    #4 (1,11; 32) at 25 are still prefilling then; all four finish before #5 (8,9; 32) at 200.
    """
    cluster = Cluster(config)
    cluster.place(1, 0.0, [1, 2, 3, 4], 64)
    cluster.place(2, 1.0, [1, 2, 5, 6], 64)
    cluster.stored(10.0, [1, 2, 3, 4])
    cluster.prefill_done(1, 10.0)
    cluster.place(3, 12.0, [1, 2, 3, 4, 7], 70)
    cluster.stored(25.0, [1, 2, 5, 6])
    cluster.prefill_done(2, 25.0)
    cluster.place(4, 25.0, [1, 11], 32)
    for uuid, t in ((3, 40.0), (4, 40.0)):
        cluster.prefill_done(uuid, t)
    for uuid, t in ((1, 60.0), (2, 80.0), (3, 100.0), (4, 120.0)):
        cluster.terminal(uuid, t)
    cluster.place(5, 200.0, [8, 9], 32)
    return cluster


def test_registered_through_the_entry_point():
    registry = collect_registries(make_plugin_manager(autoload=False, plugins=["placement"])).placement
    assert registry.get("kv_router") is KvRouter
    assert registry.get("kv_aware") is KvAware
    assert issubclass(KvAware, KvRouter)
    assert registry.get("least_loaded") is LeastLoaded


def test_five_request_table():
    cluster = five_requests()
    assert cluster.logits() == [8.0, 14.0, 10.375, 8.375, 4.0]
    assert [d.overlap_blocks for d in cluster.router.decisions] == [0, 0, 4, 1, 0]


def test_answers_carry_the_overlap():
    cluster = Cluster()
    assert cluster.place(1, 0.0, [1, 2, 3, 4], 64) == Placement(0, 0, 0, 0)
    cluster.stored(10.0, [1, 2, 3, 4])
    assert cluster.place(2, 12.0, [1, 2, 3, 9], 64) == Placement(0, 0, 3, 3)
    assert cluster.router.last_costs == {(0, 0): cluster.logits()[-1]}


@pytest.mark.parametrize("config, expected", [
    ({"overlap_score_credit": 0.5}, [8, 14, 12.375, 8.875, 4]),
    ({"overlap_score_credit": 2.0}, [8, 14, 6.375, 7.375, 4]),
    ({"prefill_load_scale": 2}, [12, 22, 14.75, 9.75, 6]),
    ({"prefill_load_scale": 0}, [4, 6, 6, 7, 2]),
    ({"overlap_score_weight": 3}, [16, 30, 19.125, 11.125, 8]),
    ({"overlap_score_weight": 0}, [4, 6, 6, 7, 2]),
    ({"overlap_score_weight": 3, "prefill_load_scale": 0.5}, [16, 30, 19.125, 11.125, 8]),
    ({"decode_active_request_weight": 1}, [8, 15, 12.375, 11.375, 4]),
    # §2.6
    ({"router_track_active_blocks": False}, [4, 8, 4.375, 1.375, 2]),
    ({"router_assume_kv_reuse": False}, [8, 16, 16.375, 15.375, 4]),
    ({"router_track_prefill_tokens": False}, [4, 6, 6, 7, 2]),
    # live-serving knobs change nothing
    ({"host_cache_hit_weight": 0.0, "disk_cache_hit_weight": 1.0, "router_event_threads": 1,
      "use_kv_events": False, "router_track_output_blocks": True, "router_ttl_secs": 1.0},
     [8, 14, 10.375, 8.375, 4]),
])
def test_five_request_knobs(config, expected):
    assert five_requests(config).logits() == expected


@pytest.mark.parametrize("lag, logit3, logit4", [
    (2.0, 10.375, 8.375),   # the event of 10 is applied at 12, before #3 is routed
    (2.5, 14.375, 12.375),  # #3 sees overlap 0, so all its 70 tokens count as prefill load
    (20, 14.375, 13.375),   # #4 at 25 sees nothing either
])  # every logit as the reference logged it (DYN_LOG=info) for the §2.3 trace
def test_event_lag(lag, logit3, logit4):
    cluster = five_requests({"kv_event_lag_ms": lag})
    assert cluster.logits() == [8.0, 14.0, logit3, logit4, 4.0]


def test_lag_applies_events_in_arrival_order():
    cluster = Cluster({"kv_event_lag_ms": 5})
    cluster.stored(1.0, [1, 2, 3, 4])
    cluster.removed(2.0, [1, 2, 3, 4])       # evicts block 4
    cluster.place(1, 6.0, [1, 2, 3, 4], 64)  # only the store is due
    cluster.place(2, 7.0, [1, 2, 3, 4], 64)
    assert [d.overlap_blocks for d in cluster.router.decisions] == [4, 3]


def test_eviction_removes_the_tail():
    cluster = Cluster()
    cluster.stored(10.0, [1, 2, 3, 4])
    cluster.removed(20.0, [1, 2, 3, 4])
    cluster.removed(20.0, [1, 2, 3])
    cluster.place(1, 30.0, [1, 2, 3, 4], 64)
    assert cluster.router.decisions[-1].overlap_blocks == 2


def decay_cluster(decay):
    """The chosen worker (0) has P = 112 against 0 on worker 1, overlap 4, isl 120 (B = 8)."""
    cluster = Cluster({"overlap_score_credit_decay": decay}, workers=2)
    cluster.place(1, 0.0, list(range(100, 107)), 112)    # tie: worker 0; P0 = 112, D0 = 7
    cluster.place(2, 1.0, list(range(200, 220)), 320)    # worker 1, D1 = 20
    cluster.prefill_done(2, 5.0)
    cluster.stored(6.0, [1, 2, 3, 4])
    cluster.place(3, 7.0, [1, 2, 3, 4, 5, 6, 7, 8], 120)
    return cluster


@pytest.mark.parametrize("decay, expected", [
    (0, 24.5), (1, 28.5 - 4 / (1 + 7 / 8)), (3, 28.5 - 4 / (1 + 21 / 8))])
def test_decay(decay, expected):
    cluster = decay_cluster(decay)
    chosen = cluster.router.decisions[-1]
    assert (chosen.worker_id, chosen.overlap_blocks) == (0, 4)
    assert chosen.logit == pytest.approx(expected, rel=1e-12)
    assert round(chosen.logit, 4) == {0: 24.5, 1: 26.3667, 3: 27.3966}[decay]
    # worker 1 is the minimum of P: it keeps its full (zero) credit
    assert chosen.costs[(1, 0)] == 120 / 16 + 20 + 7


def test_ties_go_to_the_lowest_scheduler():
    cluster = Cluster(workers=2)
    for uuid in range(4):   # every decision a tie between idle workers (§2.4's example)
        cluster.place(uuid, 100.0 * uuid, [uuid], 16)
        cluster.terminal(uuid, 100.0 * uuid + 50)
    assert [d.worker_id for d in cluster.router.decisions] == [0, 0, 0, 0]
    # with load: the 2nd request avoids worker 0, ties again go to the lowest
    cluster = Cluster(workers=3)
    for uuid in range(5):
        cluster.place(uuid, uuid, [uuid], 16)
    assert [d.worker_id for d in cluster.router.decisions] == [0, 1, 2, 0, 1]


def test_attention_dp_ranks_are_candidates():
    cluster = Cluster(workers=2, dp_size=2)
    assert [cluster.place(uuid, uuid, [uuid], 64) for uuid in range(5)] == [
        Placement(0, 0, 0, 0), Placement(0, 1, 0, 0), Placement(1, 0, 0, 0),
        Placement(1, 1, 0, 0), Placement(0, 0, 0, 0)]
    cluster.stored(10.0, [7, 8], worker_id=1, dp_rank=1)
    assert cluster.place(9, 11.0, [7, 8], 32) == Placement(1, 1, 2, 2)


def test_best_overlap_and_regret():
    cluster = Cluster(workers=2)
    cluster.stored(0.0, [1, 2, 3, 4, 5, 6, 7, 8])
    cluster.place(1, 1.0, list(range(50, 150)), 1600)      # a heavy request on worker 0
    answer = cluster.place(2, 2.0, [1, 2, 3, 4, 5, 6, 7, 8], 128)
    assert answer == Placement(1, 0, 0, 8)


def test_prefill_pool_tracks_no_blocks():
    """§2.9: 4.0 for a 64-token prompt on an idle worker, 0.0 fully cached, 10.0 = (70+90)/16
    for a 90-token prompt beside a 70-token one prefilling, 12.0 with r = 2."""
    cluster = Cluster(kind="prefill")
    cluster.place(1, 0.0, [1, 2, 3, 4], 64)
    cluster.stored(10.0, [1, 2, 3, 4])
    cluster.prefill_done(1, 10.0)
    cluster.place(2, 20.0, [1, 2, 3, 4], 64)
    assert cluster.logits() == [4.0, 0.0]
    for weight, expected in ((0, 10.0), (2, 12.0)):
        cluster = Cluster({"decode_active_request_weight": weight}, kind="prefill")
        cluster.place(1, 0.0, [1, 2, 3, 4, 5], 70)
        cluster.place(2, 1.0, [6, 7, 8, 9, 10, 11], 90)
        assert cluster.logits()[-1] == expected
    assert five_requests().router.settings.for_pool("prefill") == Cluster(kind="prefill").router.settings


def test_prefill_pool_counts_a_request_until_its_kv_leaves():
    """A 2P+1D reference run (k4's payload, overlap_score_credit 0.5,
    decode_active_request_weight 5): a prefill worker counts a request in A_w until the
    prefill worker releases its KV after the transfer (the record's source_released_ms), not
    until its prefill ends nor until it finishes decoding; the runtime tells the prefill pool's
    policy with on_terminal then. Prefill logits as logged: 23.8125, 11.5625, 1.875, 6.375."""
    cluster = Cluster({"overlap_score_credit": 0.5, "decode_active_request_weight": 5},
                      workers=2, kind="prefill")
    cluster.place(1, 0.0, list(range(1, 25)), 381)
    cluster.place(2, 0.6, list(range(100, 112)), 185)
    cluster.stored(10.0, list(range(1, 24)))
    cluster.prefill_done(1, 10.0)
    cluster.stored(10.6, list(range(100, 111)), worker_id=1)
    cluster.prefill_done(2, 10.6)
    cluster.terminal(2, 12.11552)                  # source released
    cluster.terminal(1, 17.11552)
    cluster.place(3, 31.274, [1, 2, 3, 300], 54)   # overlap 3 on worker 0
    cluster.stored(41.274, [1, 2, 3])
    cluster.prefill_done(3, 41.274)                # its KV is released only at 47.1
    cluster.place(4, 43.925, list(range(1, 7)) + [400], 102)
    assert cluster.logits() == [23.8125, 11.5625, 1.875, 6.375]
    assert [d.worker_id for d in cluster.router.decisions] == [0, 1, 0, 1]
    assert cluster.router.decisions[-1].costs[(0, 0)] == 102 / 16 - 0.5 * 6 + 5


def test_decode_pool_counts_blocks_only():
    """§2.9: D + floor(isl/bs) + r·A, no sharing, no overlap credit, overlap reported 0."""
    for weight, expected in ((0, [4.0, 9.0]), (2, [4.0, 11.0])):
        cluster = Cluster({"decode_active_request_weight": weight}, kind="decode")
        cluster.stored(0.0, [1, 2, 3, 4])   # ignored: the decode router keeps no index
        first = cluster.place(1, 0.0, [1, 2, 3, 4, 5], 70)
        cluster.place(2, 1.0, [1, 2, 3, 4, 5, 6], 90)
        assert cluster.logits() == expected
        assert first == Placement(0, 0, 0, 0)
    assert "kv_events" not in cluster.router.OBSERVES and "kv_events" in KvRouter.OBSERVES


def test_terminal_releases_blocks_and_load():
    cluster = Cluster({"decode_active_request_weight": 1})
    cluster.place(1, 0.0, [1, 2, 3, 4], 64)
    cluster.terminal(1, 5.0)                    # rejected or cut off before its prefill ended
    cluster.place(2, 6.0, [1, 2, 3, 4], 64)
    assert cluster.logits() == [8.0, 8.0]


def test_no_endpoints():
    cluster = Cluster(workers=0)
    with pytest.raises(SimulationError) as error:
        cluster.place(1, 0.0, [1], 16)
    assert str(error.value) == "placement policy error: no endpoints available to route work"


def test_removed_worker_is_forgotten():
    cluster = Cluster({"kv_event_lag_ms": 10}, workers=2)
    cluster.stored(0.0, [1, 2], worker_id=1)
    cluster.stored(1.0, [1, 2, 3], worker_id=1)      # still held back by the lag
    cluster.drain_worker(1, 5.0)
    cluster.remove_worker(1, 6.0)
    cluster.add_worker(2, 7.0)
    cluster.place(1, 20.0, [1, 2, 3], 48)
    assert (cluster.router.decisions[-1].worker_id, cluster.router.decisions[-1].overlap_blocks) == (0, 0)
    assert set(cluster.router._states) <= {(0, 0), (2, 0)}


def sampled_choices(seed, count=400):
    """Worker 0 costs 8 for the probe, worker 1 costs 40 (32 blocks of a decoding request)."""
    cluster = Cluster({"router_temperature": 0.5, "seed": seed}, workers=2)
    cluster.pool.schedulers = cluster.pool.schedulers[1:]       # only worker 1 for the setup
    cluster.place(0, 0.0, list(range(1000, 1032)), 512)
    cluster.prefill_done(0, 1.0)
    cluster._refresh()
    choices = []
    for uuid in range(1, count + 1):
        cluster.place(uuid, 2.0, [uuid, uuid + 10**6, uuid + 2 * 10**6, uuid + 3 * 10**6], 64)
        choices.append(cluster.router.decisions[-1].worker_id)
        cluster.terminal(uuid, 2.0)
    assert cluster.router.decisions[-1].costs == {(0, 0): 8.0, (1, 0): 40.0}
    return choices


def test_temperature_samples_the_softmax_reproducibly():
    choices = sampled_choices(seed=0)
    assert choices == sampled_choices(seed=0)
    assert choices != sampled_choices(seed=1)
    model = math.exp(-1 / 0.5) / (1 + math.exp(-1 / 0.5))     # 0.12 for the cost-40 worker
    assert abs(choices.count(1) / len(choices) - model) < 0.05


def test_place_does_not_queue_without_threshold():
    cluster = Cluster()
    for uuid in range(3):
        assert cluster.place(uuid, 0.0, [uuid], 8000) is not QUEUED


def test_shared_prefixes_count_once_until_their_last_request_ends():
    cluster = Cluster({"router_track_prefill_tokens": False})   # logit = D + N
    cluster.place(1, 0.0, [1, 2, 3, 4], 64)
    cluster.place(2, 1.0, [1, 2, 5], 48)
    cluster.terminal(1, 2.0)                  # blocks 1, 2 stay active for request 2
    cluster.place(3, 3.0, [1, 2, 3], 48)
    cluster.terminal(2, 4.0)
    cluster.place(4, 5.0, [1, 2, 3, 4], 64)
    assert cluster.logits() == [4, 4 + 1, 3 + 1, 3 + 1]


def test_active_set_matches_a_recount():
    """The refcounted active set against a recount over the unfinished requests, for prompts
    drawn from a small tree of shared prefixes."""
    import random

    from aisimulate_placement.kv_router_state import SchedulerState
    from test_kv_router_harness import chain

    rng = random.Random(7)
    state, live = SchedulerState(), []
    for _ in range(400):
        if live and rng.random() < 0.45:
            state.drop_active(live.pop(rng.randrange(len(live))))
        else:
            hashes = tuple(chain([rng.randrange(3) for _ in range(rng.randrange(0, 9))]))
            recount = set().union(*map(set, live)) if live else set()
            assert state.new_blocks(hashes) == len(set(hashes) - recount)
            state.add_active(hashes)
            live.append(hashes)
        recount = set().union(*map(set, live)) if live else set()
        assert set(state.active) == recount
        assert all(state.active[block] == sum(block in held for held in live) for block in recount)

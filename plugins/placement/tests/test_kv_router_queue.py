"""The kv_router's pending queue (CLUSTER.md §2.7): when it holds requests, the order it releases
them in under fcfs, lcfs and wspt, priorities, and what a released request is placed with."""

import pytest

from aisimulate_core.placement import QUEUED, Placement
from test_kv_router_harness import Cluster


def distinct(uuid, isl):
    return [1000 * uuid + block for block in range(isl // 16)]


def five_queued(policy):
    """r1..r5 of 64, 64, 64, 32, 16 tokens at t = 0..4 on one worker, budget 8192, f = 0.01: the
    worker is busy above 81.92 prefill tokens, so r3..r5 wait."""
    cluster = Cluster({"router_queue_threshold": 0.01, "router_queue_policy": policy})
    answers = [cluster.place(uuid, uuid - 1.0, distinct(uuid, isl), isl)
               for uuid, isl in zip(range(1, 6), (64, 64, 64, 32, 16))]
    assert [answer is QUEUED for answer in answers] == [False, False, True, True, True]
    return cluster


def test_fcfs_releases_in_arrival_order():
    cluster = five_queued("fcfs")
    assert cluster.router.queued_uuids() == [3, 4, 5]
    cluster.prefill_done(1, 10.0)
    assert cluster.released_uuids() == [3]
    # r2 and r3 finish prefill in the pass ending at 25; each notification drains on its own,
    # so r4 is priced with r3 still prefilling: (64 + 32)/16 + 14 = 20, then r5 18
    cluster.prefill_done(2, 25.0)
    assert cluster.released_uuids() == [4]
    cluster.prefill_done(3, 25.0)
    assert cluster.released_uuids() == [5]
    assert cluster.logits()[-2:] == [20.0, 18.0]


@pytest.mark.parametrize("policy", ["lcfs", "wspt"])
def test_lcfs_and_wspt_release_the_short_late_ones_first(policy):
    cluster = five_queued(policy)
    cluster.prefill_done(1, 10.0)
    assert cluster.released_uuids() == [5, 4]
    cluster.prefill_done(2, 25.0)
    assert cluster.released_uuids() == [3]


@pytest.mark.parametrize("policy, order", [
    ("fcfs", [3, 4, 2, 5]), ("wspt", [3, 4, 2, 5]), ("lcfs", [3, 4, 5, 2])])
def test_priorities(policy, order):
    """Four queued 64-token requests: r2 plain, r3 strict_priority 1, r4 priority 1000, r5
    priority -5 (counts as 0); equal keys leave in enqueue order (wspt: r2 before r5)."""
    cluster = Cluster({"router_queue_threshold": 0.005, "router_queue_policy": policy})
    cluster.place(1, 0.0, distinct(1, 64), 64)        # 64 > 40.96: the worker is busy
    for uuid, priority, strict in ((2, 0, 0), (3, 0, 1), (4, 1000, 0), (5, -5, 0)):
        assert cluster.place(uuid, uuid - 1.0, distinct(uuid, 64), 64, priority, strict) is QUEUED
    assert cluster.router.queued_uuids() == order
    released = []
    last = 1
    for step in range(4):
        cluster.prefill_done(last, 10.0 * (step + 1))
        (last,) = cluster.released_uuids()
        released.append(last)
    assert released == order


def test_wspt_counts_the_best_cached_prefix():
    """wspt weighs by uncached tokens, isl − best overlap × bs when queued (at least 1)."""
    cluster = Cluster({"router_queue_threshold": 0.005, "router_queue_policy": "wspt"})
    cluster.stored(0.0, [1, 2, 3, 4])
    cluster.place(1, 0.0, distinct(1, 64), 64)
    cluster.place(2, 1.0, distinct(2, 32), 32)          # 32 uncached
    cluster.place(3, 2.0, [1, 2, 3, 4], 64)            # fully cached: 0, counted as 1
    cluster.place(4, 3.0, distinct(4, 16), 16)          # 16 uncached
    assert cluster.router.queued_uuids() == [3, 4, 2]


def test_busy_is_strictly_above_the_threshold():
    cluster = Cluster({"router_queue_threshold": 64 / 8192})
    cluster.place(1, 0.0, distinct(1, 64), 64)          # P = 64, not above 64
    assert cluster.place(2, 1.0, distinct(2, 64), 64) is not QUEUED
    assert cluster.place(3, 2.0, distinct(3, 64), 64) is QUEUED


def test_a_released_request_keeps_its_arrival_overlap():
    """Reference (one worker, f = 0.005, DYN_LOG=info): r1 = 1..4 (64) at 0 → 8.0; r2 =
    1..5 (80) at 1 waits; r1's pass stores 1..4 at 10 and r2 is released then with overlap 0 and
    logit 10.0 = 80/16 + 4 + 1: the router looked r2's prefix up when it arrived."""
    cluster = Cluster({"router_queue_threshold": 0.005})
    cluster.place(1, 0.0, [1, 2, 3, 4], 64)
    assert cluster.place(2, 1.0, [1, 2, 3, 4, 5], 80) is QUEUED
    cluster.stored(10.0, [1, 2, 3, 4])
    cluster.prefill_done(1, 10.0)
    assert cluster.released == [(2, Placement(0, 0, 0, 0))]
    assert cluster.logits() == [8.0, 10.0]


def test_no_candidates_waits_for_a_worker():
    cluster = Cluster({"router_queue_threshold": 0.5}, workers=0)
    assert cluster.place(1, 0.0, [1], 16) is QUEUED
    assert cluster.place(2, 1.0, [2], 16) is QUEUED
    cluster.add_worker(3, 20.0)
    assert cluster.released == [(1, Placement(3, 0, 0, 0)), (2, Placement(3, 0, 0, 0))]


def test_a_queued_request_that_ends_is_never_released():
    cluster = Cluster({"router_queue_threshold": 0.005})
    cluster.place(1, 0.0, distinct(1, 64), 64)
    cluster.place(2, 1.0, distinct(2, 64), 64)
    cluster.place(3, 2.0, distinct(3, 64), 64)
    cluster.terminal(2, 5.0)                            # cut off while waiting
    cluster.prefill_done(1, 10.0)
    assert cluster.released_uuids() == [3]
    assert cluster.router.queued_uuids() == []


def test_removal_drains_onto_the_remaining_workers():
    cluster = Cluster({"router_queue_threshold": 0.005}, workers=2)
    cluster.place(1, 0.0, distinct(1, 64), 64)
    cluster.place(2, 0.0, distinct(2, 64), 64)
    assert cluster.place(3, 1.0, distinct(3, 64), 64) is QUEUED
    cluster.drain_worker(1, 2.0)
    assert cluster.released == []
    cluster.prefill_done(2, 5.0)                        # worker 1 is no longer a candidate
    assert cluster.released == []
    cluster.prefill_done(1, 10.0)
    assert cluster.released == [(3, Placement(0, 0, 0, 0))]

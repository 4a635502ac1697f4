import pytest

from aisimulate_core.errors import ConfigError, SimulationError
from aisimulate_core.placement import PlacementRequest, PoolView, WorkerView
from aisimulate_core.plugins import make_plugin_manager
from aisimulate_core.registry import collect_registries
from aisimulate_placement import RoundRobin


def pool(kind, *dp_sizes, first_id=0):
    return PoolView(kind, [WorkerView(first_id + i, dp) for i, dp in enumerate(dp_sizes)])


def request(uuid=1, dp_rank=None):
    return PlacementRequest(uuid=uuid, dp_rank=dp_rank, input_length=16, session_id=None)


def place_many(policy, count, dp_rank=None):
    return [policy.place(request(uuid, dp_rank)) for uuid in range(count)]


def test_registered_through_the_entry_point():
    pm = make_plugin_manager(autoload=False, plugins=["placement"])
    assert collect_registries(pm).placement.get("round_robin") is RoundRobin


def test_aggregated_cycles_workers_then_ranks():
    policy = RoundRobin({}, pool("agg", 2, 2, 2))
    assert place_many(policy, 7) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (0, 0)]


def test_aggregated_single_rank_workers():
    policy = RoundRobin({}, pool("agg", 1, 1))
    assert place_many(policy, 3) == [(0, 0), (1, 0), (0, 0)]


def test_aggregated_pinned_rank_still_advances_the_worker_cursor():
    policy = RoundRobin({}, pool("agg", 2, 2, 2))
    assert policy.place(request(1, dp_rank=1)) == (0, 1)
    assert policy.place(request(2)) == (1, 0)
    # Pinning does not move worker 0's own rank cursor.
    assert policy.place(request(3)) == (2, 0)
    assert policy.place(request(4)) == (0, 0)


def test_aggregated_rank_out_of_range():
    policy = RoundRobin({}, pool("agg", 2, 2))
    with pytest.raises(ConfigError) as error:
        policy.place(request(7, dp_rank=3))
    assert str(error.value) == "request 7: dp_rank 3 out of range for dp_size 2"


def test_aggregated_uses_worker_id_order():
    workers = PoolView("agg", [WorkerView(5, 1), WorkerView(2, 1)])
    policy = RoundRobin({}, workers)
    assert place_many(policy, 3) == [(2, 0), (5, 0), (2, 0)]


@pytest.mark.parametrize("kind", ["prefill", "decode"])
def test_disaggregated_cycles_flattened_schedulers(kind):
    policy = RoundRobin({}, pool(kind, 2, 2))
    assert place_many(policy, 5) == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 0)]


def test_disaggregated_preferred_rank_cycles_workers_exposing_it():
    policy = RoundRobin({}, pool("decode", 2, 1, 2))
    assert place_many(policy, 3, dp_rank=1) == [(0, 1), (2, 1), (0, 1)]


def test_disaggregated_rank_out_of_range():
    policy = RoundRobin({}, pool("prefill", 2, 2))
    with pytest.raises(ConfigError) as error:
        policy.place(request(9, dp_rank=2))
    assert str(error.value) == "request 9: dp_rank 2 out of range for dp_size 2"


def test_config_must_be_empty():
    assert RoundRobin({}, pool("agg", 1)).config == {}
    with pytest.raises(ConfigError) as error:
        RoundRobin({"seed": 1}, pool("agg", 1))
    assert str(error.value) == "$.spec.adapters.placement.config.seed: unknown field"


def test_follows_workers_added_and_removed():
    # the reference's rule (differential fuzzing, tests/fixtures/cluster_reference/
    # rr_cursor_after_removal): a positional cursor into the active workers, kept as they change
    policy = RoundRobin({}, pool("agg", 1, 1))
    assert policy.place(request(1)) == (0, 0)
    policy.on_worker_ready(WorkerView(2, 1), 10.0)
    assert place_many(policy, 3) == [(1, 0), (2, 0), (0, 0)]
    policy.on_worker_draining(WorkerView(0, 1), 20.0)
    # the cursor stayed at index 1, now worker 2's place
    assert place_many(policy, 2) == [(2, 0), (1, 0)]
    policy.on_worker_removed(WorkerView(0, 1), 30.0)
    assert place_many(policy, 1) == [(2, 0)]


def test_a_worker_added_after_the_last_placed_one_is_next():
    # CLUSTER.md §3.5: one worker, requests every 50 ms, worker 1 added at 60: the request at
    # 100 goes to worker 1, not to worker 0
    policy = RoundRobin({}, pool("agg", 1))
    assert place_many(policy, 2) == [(0, 0), (0, 0)]
    policy.on_worker_ready(WorkerView(1, 1), 60.0)
    assert place_many(policy, 3) == [(1, 0), (0, 0), (1, 0)]


def test_terminal_notification_is_accepted():
    policy = RoundRobin({}, pool("agg", 1))
    policy.on_terminal(1, 5.0)
    assert policy.place(request(2)) == (0, 0)


def test_no_active_worker_is_the_reference_error():
    policy = RoundRobin({}, pool("agg", 1))
    policy.on_worker_draining(WorkerView(0, 1), 1.0)
    with pytest.raises(SimulationError) as error:
        policy.place(request(3))
    assert str(error.value) == ("request 3: no active workers for round-robin placement in the "
                                "agg pool")


def test_flattened_cursor_follows_workers_added_and_removed():
    policy = RoundRobin({}, pool("decode", 2, 2))
    assert place_many(policy, 3) == [(0, 0), (0, 1), (1, 0)]
    policy.on_worker_removed(WorkerView(0, 2), 1.0)
    assert place_many(policy, 2) == [(1, 1), (1, 0)]
    policy.on_worker_ready(WorkerView(2, 2), 2.0)
    assert place_many(policy, 3) == [(1, 1), (2, 0), (2, 1)]

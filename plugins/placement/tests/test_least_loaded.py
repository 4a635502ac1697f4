"""least_loaded: fewest active requests, then fewest active blocks, then the lowest scheduler.

The policy reads the engines only through SchedulerView; the views here wrap stand-in ranks
that hold just what a view reads (running and waiting queues, KV gauges).
"""

import pytest

from aisimulate_core.errors import ConfigError, SimulationError
from aisimulate_core.placement import PlacementRequest, PoolView, SchedulerView, WorkerView
from aisimulate_placement import LeastLoaded


class StandInRank:
    def __init__(self, running=0, waiting=0, active_blocks=0):
        self.running = [object()] * running
        self.waiting = [object()] * waiting
        self.active_blocks = active_blocks
        self.gauge_reads = 0

    def kv_gauges(self):
        self.gauge_reads += 1
        return self.active_blocks, 0


def pool(ranks, dp_size=1, kind="agg"):
    """``ranks[i]`` is scheduler i (worker i // dp_size, rank i % dp_size)."""
    workers = sorted({index // dp_size for index in range(len(ranks))})
    return PoolView(kind, [WorkerView(worker, dp_size) for worker in workers], schedulers=[
        SchedulerView(rank, index // dp_size, index % dp_size, index) for index, rank in enumerate(ranks)])


def place(policy, dp_rank=None, uuid=7):
    return policy.place(PlacementRequest(uuid, dp_rank, 64, None))


def test_fewest_active_requests_running_plus_waiting():
    ranks = [StandInRank(running=2), StandInRank(running=1, waiting=2), StandInRank(waiting=1)]
    assert place(LeastLoaded({}, pool(ranks))) == (2, 0)
    # block counts are read only to break a tie
    assert [rank.gauge_reads for rank in ranks] == [0, 0, 0]


def test_then_fewest_active_blocks_then_lowest_scheduler():
    ranks = [StandInRank(running=1, active_blocks=9), StandInRank(running=1, active_blocks=4),
             StandInRank(running=1, active_blocks=4), StandInRank(running=3)]
    assert place(LeastLoaded({}, pool(ranks, dp_size=2))) == (0, 1)


def test_reads_the_engine_live():
    ranks = [StandInRank(), StandInRank()]
    policy = LeastLoaded({}, pool(ranks))
    assert place(policy) == (0, 0)
    ranks[0].waiting.append(object())   # the engine took the request
    assert place(policy) == (1, 0)


def test_honours_an_authored_rank():
    ranks = [StandInRank(), StandInRank(running=5), StandInRank(running=1), StandInRank(running=2)]
    policy = LeastLoaded({}, pool(ranks, dp_size=2))
    assert place(policy, dp_rank=1) == (1, 1)
    with pytest.raises(ConfigError) as error:
        place(policy, dp_rank=2)
    assert str(error.value) == "request 7: dp_rank 2 out of range for dp_size 2"


def test_no_active_worker():
    with pytest.raises(SimulationError) as error:
        place(LeastLoaded({}, PoolView("decode")))
    assert str(error.value) == "request 7: no active workers for least-loaded placement in the decode pool"


def test_takes_no_config_and_observes_nothing():
    assert LeastLoaded.OBSERVES == frozenset()
    with pytest.raises(ConfigError) as error:
        LeastLoaded({"tie_break": "random"}, pool([StandInRank()]))
    assert str(error.value) == "$.spec.adapters.placement.config.tie_break: unknown field"

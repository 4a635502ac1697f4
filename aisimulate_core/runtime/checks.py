"""Run-time invariant checks, on when ``AISIMULATE_CHECK=1`` (the test suite turns them on).

After every visited time: each rank's KV blocks are conserved (free + cached + in use = the
pool), the clock never goes back, and every request reaches a terminal status exactly once;
at the end of a run that drained, none is left in flight. A violation raises
``SimulationError`` naming the rank or request and the numbers that disagree.

The environment is read once, when a simulation is built: with checks off nothing is
installed, so a normal run pays nothing; with them on, the simulation's step, terminal and
run methods are wrapped on that instance only.
"""

from __future__ import annotations

import math
import os

from ..engine.request import request_name
from ..errors import NativeError, SimulationError

ENV = "AISIMULATE_CHECK"


def checks_enabled():
    return os.environ.get(ENV, "") not in ("", "0")


def install_checks_from_env(sim):
    if checks_enabled():
        InvariantChecker(sim).install()


class InvariantChecker:
    def __init__(self, sim):
        self.sim = sim
        self.terminal = {}       # uuid -> the status it ended with

    def install(self):
        sim = self.sim
        step, terminal, run_until = sim._step, sim._terminal, sim.run_until

        def checked_step(t):
            now = sim.now_ms
            if t < now:
                raise SimulationError(f"invariant: the clock went back from {now} ms to {t} ms")
            step(t)
            if sim.now_ms != t:
                raise SimulationError(f"invariant: a step at {t} ms left the clock at "
                                      f"{sim.now_ms} ms")
            self.check_kv()

        def checked_terminal(request, end_ms, status, record):
            self.check_terminal(request, end_ms, status)
            terminal(request, end_ms, status, record)

        def checked_run_until(t_ms):
            run_until(t_ms)
            if sim.is_done() and math.isinf(sim.max_sim_time_ms):
                self.check_drained()

        sim._step = checked_step
        sim._terminal = checked_terminal
        sim.run_until = checked_run_until
        sim.invariant_checker = self

    # ------------------------------------------------------------------ checks
    def check_terminal(self, request, end_ms, status):
        uuid = request.uuid
        if uuid in self.terminal:
            raise SimulationError(f"invariant: request {request_name(request)} reached '{status}' at "
                                  f"{end_ms} ms after it had ended '{self.terminal[uuid]}'")
        if end_ms < request.arrival_ms:
            raise SimulationError(f"invariant: request {request_name(request)} ended at {end_ms} ms, "
                                  f"before its arrival at {request.arrival_ms} ms")
        self.terminal[uuid] = status

    def check_drained(self):
        sim = self.sim
        if sim.in_flight != 0 or len(self.terminal) != sim.arrived:
            raise SimulationError(f"invariant: the run drained with {sim.arrived} arrivals, "
                                  f"{len(self.terminal)} terminals and {sim.in_flight} requests "
                                  f"in flight")

    def check_kv(self):
        for worker in self.sim.workers:
            for rank in worker.ranks:
                if hasattr(rank, "cache"):
                    check_radix_rank(rank, worker)
                else:
                    check_block_rank(rank, worker)


def check_block_rank(rank, worker):
    """vLLM / TensorRT-LLM: the block pool's counters add up and agree with its lists."""
    pool = rank.pool
    free, cached, active = pool.free_blocks(), pool.inactive(), pool.active()
    if free < 0 or cached < 0 or active < 0 or free + cached + active != pool.num_blocks:
        raise _kv_error(rank, worker, f"free {free} + cached {cached} + active {active} blocks "
                                      f"!= the pool's {pool.num_blocks}")
    try:
        pool.check()
    except NativeError as exc:
        raise _kv_error(rank, worker, str(exc)) from None
    # blocks held by requests: running ones and waiting ones with a KV table (an activated
    # decode destination); a reservation in transfer is in no queue, so it is skipped then
    # (a vLLM decoder's count in an open stretch is kept per bucket: request_blocks)
    blocks = getattr(rank, "request_blocks", None) or (lambda r: r.held_blocks)
    held = sum(blocks(r) for r in rank.running)
    held += sum(blocks(r) for r in rank.waiting if r.seq >= 0)
    if getattr(rank, "holds", 0) or getattr(rank, "held_sources", 0):
        return   # blocks of reservations in transfer / held sources are in no queue
    if held != rank.held_total:
        raise _kv_error(rank, worker, f"its requests hold {held} blocks, the rank counts "
                                      f"{rank.held_total}")
    if active > held:
        # every block in use belongs to some request (shared prefix blocks to several)
        raise _kv_error(rank, worker, f"{active} blocks are in use but its requests hold only "
                                      f"{held}")


def check_radix_rank(rank, worker):
    """SGLang: free + evictable + locked tree pages + pages requests own off the tree = total."""
    cache = rank.cache
    running = rank.running
    ps = rank.page_size
    owned = 0
    for r in running:
        length = r.prompt_len + r.base_gen + running.D - r.open_start
        owned += -(-length // ps) * ps - r.committed_blocks
    for r in rank.waiting:
        if r.seq is not None:
            owned += r.held_blocks - r.committed_blocks
    off_queue = getattr(rank, "off_queue_tokens", None)
    if off_queue is not None:   # disaggregated SGLang roles: held sources, reserved destinations
        owned += off_queue()
    free, evictable, locked = cache.free_tokens, cache.evictable_size, cache.protected_size
    if min(free, evictable, locked, owned) < 0 or free + evictable + locked + owned != cache.total_tokens:
        raise _kv_error(rank, worker, f"free {free} + evictable {evictable} + locked {locked} + "
                                      f"request-owned {owned} tokens != the pool's "
                                      f"{cache.total_tokens}")


def _kv_error(rank, worker, detail):
    return SimulationError(f"invariant: KV blocks of worker {worker.idx} dp rank {rank.dp_rank} "
                           f"are not conserved: {detail}")

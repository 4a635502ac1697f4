"""The agentic driver: replays an ``AgenticTrace`` dependency graph (SEMANTICS.md 5).

Each node is one request. A root is ready at its ``not_before_ms``; any other node when its
last dependency fires, at ``max(not_before_ms, max over edges of fire time + delay)``.
Dispatch edges fire when their source is handed to the runtime, completion edges when it
completes. A rejected, cancelled or failed node fails its play: the play's nodes not yet
dispatched are skipped, those in flight still run. A play is a trajectory; its end-to-end
latency is its last terminal minus its first root dispatch, counted for completed plays only.
With ``agentic_lanes`` the plays run that many at a time, each shifted to its lane's start
(``lanes.Lanes``, FEATURES.md 3).

The report also gets the graph's identity (``AgenticTrace.digest``), each play's outcome and
its lifecycle: a dispatched node contributes three events (dispatch, causal terminal,
quiescence), a skipped node one, a settled play one; their count and the reference's BLAKE3
digest of the transcript (``_Lifecycle``) are summary keys. Each request carries the
reference's ``agentic`` object: its ids, its lane (with lanes), its play's root (when the play
has one root) and, on a spawned request, the request that spawned it.
"""

from __future__ import annotations

import heapq
import math

import blake3

from ..engine.request import SimRequest
from .graph import encode_json_lines, sorted_dependencies
from .prompt import Prompt
from .trace import HashInterner
from .driver import WorkloadDriver
from .lanes import Lanes

BLOCKED, READY, EMITTED, COMPLETED, FAILED, SKIPPED = range(6)
LIFECYCLE_SCHEMA = "aisimulate.agentic.lifecycle.v1"
LIFECYCLE_DIGEST_DOMAIN = b"aisimulate-agentic-lifecycle-v1\0"
# transcript lines are hashed this many at a time (one encode, one update), so memory stays
# bounded
_HASH_BATCH = 4096


class _Lifecycle:
    """The reference's lifecycle transcript, hashed as it goes: one compact JSON object a line
    (schema, ordinal, at_ms, play_id, request_id, event, status), BLAKE3 after a domain tag.

    The reference hears the ends of one instant in rounds: first those of every worker's
    passes that end then; then those of the passes that start then (requests that end as they
    are admitted, a prefill-only prompt found whole in the cache; a pass that only rejects,
    which takes no time), and so on while passes of no duration follow. Each round is one
    batch: its causal terminals (each followed by the nodes its failure skips) in graph order,
    then its quiescences (a play's own after the last of its requests) in graph order. The
    dispatches of the instant come between the rounds, as the driver is asked for work. So
    ends are held until the clock moves or a dispatch is recorded. A request is quiescent
    when it holds nothing any more: at its terminal, or later when a disaggregated prefill
    worker releases its source blocks."""

    def __init__(self):
        self.count = 0                      # events recorded, held ones included
        self._hasher = blake3.blake3(LIFECYCLE_DIGEST_DOMAIN)
        self._ordinal = 0
        self._unhashed = []                 # transcript lines written but not yet hashed
        self._at = None
        self._rounds = []                   # of self._at: (terminals, quiescences, at admission)
        self.round_ordinal = 0              # of the round the last end joined, over the run

    def _write(self, at_ms, play_id, request_id, event, status=None):
        # a literal (keys in the transcript's order), not a dict grown key by key; the
        # status, when there is one, is the last key
        if request_id is None:
            line = {"schema": LIFECYCLE_SCHEMA, "ordinal": self._ordinal,
                    "at_ms": float(at_ms), "play_id": play_id, "event": event}
        else:
            line = {"schema": LIFECYCLE_SCHEMA, "ordinal": self._ordinal,
                    "at_ms": float(at_ms), "play_id": play_id, "request_id": request_id,
                    "event": event}
        if status is not None:
            line["status"] = status
        unhashed = self._unhashed
        unhashed.append(line)
        if len(unhashed) >= _HASH_BATCH:
            self._hash_lines()
        self._ordinal += 1

    def _hash_lines(self):
        # each line as serde_json writes it, and a newline, as the reference hashes them
        self._hasher.update(encode_json_lines(self._unhashed))
        self._unhashed.clear()

    def dispatch(self, at_ms, play_id, request_id, sources):
        """``sources``: the nodes whose ends the dispatched one waited for. A disaggregated
        request ending as it reaches its decode worker comes after the dispatches of its
        instant, unless one of those waited for it (the reference's order)."""
        rounds = self._rounds
        if at_ms == self._at and rounds:
            later = next((k for k, r in enumerate(rounds) if r[2]), None)
            if later is not None and not any(
                    end[0] in sources for r in rounds[later:] for end in (*r[0], *r[1])):
                for terminals, quiescent, _ in rounds[:later]:
                    self._write_batch(terminals, quiescent)
                del rounds[:later]
            else:
                self.flush()
        else:
            self.flush()
        self.count += 1
        self._write(at_ms, play_id, request_id, "dispatch")

    def _round(self, at_ms, new_round, at_admission):
        """The batch an end at ``at_ms`` joins. ``new_round``: the runtime asked for work since
        the last end; ``at_admission``: the request ends as it is admitted. Either begins a
        later round of the instant if the current one holds ends (of passes, for the
        latter)."""
        if at_ms != self._at:
            self.flush()
            self._at = at_ms
        rounds = self._rounds
        if rounds:
            last = rounds[-1]
            held = last[0] or last[1]
            if held and (new_round or (at_admission and not last[2])):
                rounds.append(([], [], at_admission))
                self.round_ordinal += 1
            elif not held:
                rounds[-1] = ([], [], at_admission)
        else:
            rounds.append(([], [], at_admission))
            self.round_ordinal += 1
        return rounds[-1]

    def terminal(self, at_ms, new_round, at_admission, node, play, play_id, request_id, status,
                 skipped):
        """``skipped``: (play_id, request_id) of the nodes this failure skipped."""
        self._round(at_ms, new_round, at_admission)[0].append(
            (node, play, play_id, request_id, status, skipped))
        self.count += 1 + len(skipped)

    def quiescent(self, at_ms, new_round, at_admission, node, play, play_id, request_id,
                  settles):
        self._round(at_ms, new_round, at_admission)[1].append(
            (node, play, play_id, request_id, settles))
        self.count += 1 + settles

    def flush(self):
        for terminals, quiescent, _ in self._rounds:
            self._write_batch(terminals, quiescent)
        self._rounds.clear()

    def _write_batch(self, terminals, quiescent):
        terminals.sort()
        quiescent.sort()
        skipped = {}                         # a failure's skips go with the play's first
        for _, play, _, _, _, skips in terminals:
            skipped.setdefault(play, []).extend(skips)
        for _, play, play_id, request_id, status, _ in terminals:
            self._write(self._at, play_id, request_id, "causal_terminal", status)
            if status != "completed" and skipped.get(play):
                for skipped_play, skipped_id in skipped.pop(play):
                    self._write(self._at, skipped_play, skipped_id, "skipped")
        settling = {play for _, play, _, _, settles in quiescent if settles}
        last = {play: node for node, play, _, _, _ in quiescent}
        for node, play, play_id, request_id, _ in quiescent:
            self._write(self._at, play_id, request_id, "quiescent")
            if play in settling and last[play] == node:
                self._write(self._at, play_id, None, "play_quiescent")
        terminals.clear()
        quiescent.clear()

    def digest(self):
        self.flush()
        self._hash_lines()
        return self._hasher.hexdigest()


def _ends_at_admission(request, now_ms):
    """Whether a disaggregated request ends as it reaches its decode worker with nothing to
    decode. The reference hears those in a later round of the instant; the disaggregated
    runtime completes them in the step round of the pass ends (an aggregated one asks the
    driver for work between its rounds: a prompt found whole in the cache ends then)."""
    handoff = request.handoff
    if handoff is None:
        return False
    copy = handoff.decode
    if copy is None or copy.stretches:
        return False
    admissions = copy.admissions
    return bool(admissions) and admissions[-1][0] == now_ms


class AgenticRequest(SimRequest):
    """A request of a graph node: a SimRequest with the record's ``agentic`` object."""

    __slots__ = ("agentic",)


def _root_ids(graph):
    """Each play's root for the records: its only root; a play with several has none (the
    reference writes no ``root_id`` then)."""
    nodes = graph.nodes
    return [nodes[play.roots[0]].request_id if len(play.roots) == 1 else None
            for play in graph.plays]


def _parent_ids(graph):
    """The request each node was spawned from (its first spawn dependency in the canonical
    order, ``graph.sorted_dependencies``), else None."""
    parents = []
    for node in graph.nodes:
        spawns = [d for d in node.dependencies if d.relation == "spawn"]
        if len(spawns) > 1:   # the first in the canonical order
            spawns = [d for d in sorted_dependencies(node) if d.relation == "spawn"]
        parents.append(spawns[0].request_id if spawns else None)
    return parents


class _PlayState:
    __slots__ = ("play", "in_flight", "running", "completed", "failed", "root_dispatch_ms",
                 "max_terminal_ms", "failure", "failed_at_ms", "settled_at_ms")

    def __init__(self, play):
        self.play = play
        self.in_flight = 0                    # dispatched, not yet quiescent
        self.running = 0                      # dispatched, not yet terminal
        self.completed = 0
        self.failed = False
        self.root_dispatch_ms = None
        self.max_terminal_ms = None
        self.failure = None                   # (request_id, status, node) of the first failure
        self.failed_at_ms = None
        self.settled_at_ms = None             # when its last request went quiescent

    def settled(self):
        return self.in_flight == 0 and (self.failed or self.completed == len(self.play.nodes))

    def decided(self):
        """Every node completed, or failed with every dispatched node terminal: what frees a
        lane (a disaggregated source still held does not keep it)."""
        return self.running == 0 and (self.failed or self.completed == len(self.play.nodes))


class AgenticDriver(WorkloadDriver):
    """``lanes``: replay the plays that many at a time (``lanes.Lanes``); None: every play at
    its authored times."""

    def __init__(self, graph, lanes=None):
        nodes = graph.nodes
        self.graph = graph
        self.block_size = graph.block_size
        self.total = len(nodes)
        interner = HashInterner()
        self._hash_ids = [interner(node.hash_ids) for node in nodes]
        n = len(nodes)
        self._state = [BLOCKED] * n
        self._remaining = [len(node.dependencies) for node in nodes]
        self._ready_after = [node.not_before_ms for node in nodes]
        self._on_dispatch = on_dispatch = [[] for _ in range(n)]
        self._on_completion = on_completion = [[] for _ in range(n)]
        # the nodes each node waits for, gathered on the same walk of the edges
        self._sources = sources = []
        index = graph.index
        for target, node in enumerate(nodes):
            waits_for = []
            for dep in node.dependencies:
                source = index[dep.request_id]
                edges = on_dispatch if dep.trigger == "dispatch" else on_completion
                edges[source].append((target, dep.delay_ms))
                waits_for.append(source)
            sources.append(frozenset(waits_for))
        self._plays = [_PlayState(play) for play in graph.plays]
        self._play_of = [0] * n
        self._is_root = [False] * n
        for p, play in enumerate(graph.plays):
            for i in play.nodes:
                self._play_of[i] = p
            for i in play.roots:
                self._is_root[i] = True
        self._lifecycle = _Lifecycle()
        self._asked = False                   # the runtime asked for work since the last end
        roots = _root_ids(graph)
        self._root_id = [roots[p] for p in self._play_of]
        self._parent_id = _parent_ids(graph)
        self._heap = []
        self._lanes = None if lanes is None else Lanes(lanes, len(graph.plays))
        if self._lanes is None:
            for play in graph.plays:
                for root in play.roots:
                    self._schedule(root, self._ready_after[root])
        else:
            for play, _ in self._lanes.initial():
                self._activate(play, 0.0)

    def _activate(self, play_index, start_ms):
        """Start a play on its lane at ``start_ms``: its not_before times shifted so that its
        earliest root starts then."""
        play = self.graph.plays[play_index]
        nodes, ready_after = self.graph.nodes, self._ready_after
        first = min(nodes[i].not_before_ms for i in play.roots)
        for i in play.nodes:
            ready_after[i] = start_ms + max(nodes[i].not_before_ms - first, 0.0)
        for root in play.roots:
            self._schedule(root, ready_after[root])

    def _start_freed_lanes(self):
        for play, _, at_ms in self._lanes.due():
            self._activate(play, at_ms)

    def _schedule(self, node, ready_ms):
        if self._state[node] == BLOCKED:
            self._state[node] = READY
            heapq.heappush(self._heap, (ready_ms, node))

    def _release(self, edges, now_ms):
        state, remaining, ready_after = self._state, self._remaining, self._ready_after
        for target, delay_ms in edges:
            if state[target] != BLOCKED:
                continue
            remaining[target] -= 1
            fire = now_ms + delay_ms
            if fire > ready_after[target]:
                ready_after[target] = fire
            if remaining[target] == 0:
                self._schedule(target, ready_after[target])

    # ------------------------------------------------------------------ runtime contract
    def next_ready_ms(self):
        self._asked = True
        if self._lanes is not None:
            self._start_freed_lanes()
        heap = self._heap
        while heap and self._state[heap[0][1]] != READY:
            heapq.heappop(heap)             # a skipped node's stale entry
        return heap[0][0] if heap else math.inf

    def pop_ready(self, now_ms, limit):
        self._asked = True
        if self._lanes is not None:
            self._start_freed_lanes()
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms and len(out) < limit:
            ready_ms, index = heapq.heappop(heap)
            if self._state[index] != READY:
                continue
            out.append(self._request(index, ready_ms))
            self._state[index] = EMITTED
            node = self.graph.nodes[index]
            sources = self._sources[index]
            if self._is_root[index] and self._lanes is not None:
                sources = sources | self._lanes.started_by(self._play_of[index])
            self._lifecycle.dispatch(now_ms, node.play_id, node.request_id, sources)
            play = self._plays[self._play_of[index]]
            play.in_flight += 1
            play.running += 1
            if self._is_root[index] and (play.root_dispatch_ms is None
                                         or now_ms < play.root_dispatch_ms):
                play.root_dispatch_ms = now_ms
            # a dispatch edge with no delay may release a node into this very call
            self._release(self._on_dispatch[index], now_ms)
        return out

    def _request(self, index, ready_ms):
        node = self.graph.nodes[index]
        prompt = Prompt.from_hash_ids(self._hash_ids[index], node.input_length, self.block_size)
        request = AgenticRequest(0, prompt, node.max_output_tokens, ready_ms,
                                 request_id=node.request_id, session_id=node.session_id,
                                 play_id=node.play_id, output_token_ids=node.output_token_ids,
                                 driver_ref=index)
        agentic = {"request_id": node.request_id, "play_id": node.play_id,
                   "conversation_id": node.session_id}
        if self._lanes is not None:
            agentic["lane_id"] = Lanes.lane_id(self._lanes.lane_of_play[self._play_of[index]])
        if self._root_id[index] is not None:
            agentic["root_id"] = self._root_id[index]
        if self._parent_id[index] is not None:
            agentic["parent_id"] = self._parent_id[index]
        request.agentic = agentic
        return request

    @property
    def lifecycle_events(self):
        """Lifecycle events so far (counted as the module doc says)."""
        return self._lifecycle.count

    def on_terminal(self, request, now_ms, status, quiescent=True):
        """``quiescent``: the request holds nothing any more; a runtime that releases some of
        it later passes False and calls ``on_quiescent`` then."""
        index = request.driver_ref
        node = self.graph.nodes[index]
        play_index = self._play_of[index]
        play = self._plays[play_index]
        if play.max_terminal_ms is None or now_ms > play.max_terminal_ms:
            play.max_terminal_ms = now_ms
        skipped = []
        if status == "completed":
            self._state[index] = COMPLETED
            play.completed += 1
            if not play.failed:
                self._release(self._on_completion[index], now_ms)
        else:
            self._state[index] = FAILED
            if not play.failed:
                play.failed = True
                play.failed_at_ms = now_ms
                state, nodes = self._state, self.graph.nodes
                for i in play.play.nodes:
                    if state[i] == BLOCKED or state[i] == READY:
                        state[i] = SKIPPED
                        skipped.append((nodes[i].play_id, nodes[i].request_id))
            # the play's failure is its first, the lowest node at one instant
            if play.failure is None or (now_ms == play.failed_at_ms and index < play.failure[2]):
                play.failure = (node.request_id, status, index)
        play.running -= 1
        new_round, self._asked = self._asked, False
        at_admission = _ends_at_admission(request, now_ms)
        lifecycle = self._lifecycle
        lifecycle.terminal(now_ms, new_round, at_admission, index, play_index, node.play_id,
                           node.request_id, status, skipped)
        if self._lanes is not None and play.decided():
            self._lanes.settled(lifecycle.round_ordinal, index, play_index, now_ms)
        if quiescent:
            self._quiesce(index, now_ms, False, at_admission)

    def on_quiescent(self, request, now_ms):
        """A request that reached its terminal earlier released the last it held."""
        new_round, self._asked = self._asked, False
        self._quiesce(request.driver_ref, now_ms, new_round, False)

    def _quiesce(self, index, now_ms, new_round, at_admission):
        node = self.graph.nodes[index]
        play_index = self._play_of[index]
        play = self._plays[play_index]
        play.in_flight -= 1
        settles = play.settled()
        if settles:
            play.settled_at_ms = now_ms
        self._lifecycle.quiescent(now_ms, new_round, at_admission, index, play_index,
                                  node.play_id, node.request_id, settles)

    # ------------------------------------------------------------------ report
    def trajectories(self):
        """(plays, e2e latency of each completed play in play order)."""
        latencies = []
        for play in self._plays:
            if play.failed or play.completed != len(play.play.nodes):
                continue
            if play.root_dispatch_ms is not None and play.max_terminal_ms is not None:
                latencies.append(play.max_terminal_ms - play.root_dispatch_ms)
        return len(self._plays), latencies

    def play_outcomes(self):
        outcomes = []
        for play in self._plays:
            entry = {"play_id": play.play.play_id}
            if play.settled_at_ms is None:
                entry["status"] = "incomplete"
            else:
                entry["status"] = "failed" if play.failed else "completed"
                # decided at the first failure or the last completion; settled when the
                # last request in flight went quiescent
                entry["causal_terminal_ms"] = (play.failed_at_ms if play.failed
                                               else play.max_terminal_ms)
                entry["settled_at_ms"] = play.settled_at_ms
            if play.failure is not None:
                entry["failure_request_id"], entry["failure_status"], _ = play.failure
            outcomes.append(entry)
        return outcomes

    def report_extras(self, collector):
        total, latencies = self.trajectories()
        collector.set_trajectories(total=total, completed=len(latencies),
                                   e2e_latencies_ms=latencies)
        graph = self.graph
        collector.add_extra("agentic_graph", {
            "source": {"format": graph.source_format, "digest": graph.source_digest},
            "graph_digest": graph.digest(),
            "block_size": graph.block_size,
            "node_count": len(graph.nodes),
            "play_count": len(graph.plays),
            "source_models": graph.models(),
        })
        collector.add_extra("agentic_lifecycle_event_count", self.lifecycle_events)
        collector.add_extra("agentic_lifecycle_digest", self.lifecycle_digest())
        collector.add_extra("agentic_play_outcomes", self.play_outcomes())
        for key, value in graph.summary_extras.items():
            collector.add_extra(key, value)

    def lifecycle_digest(self):
        return self._lifecycle.digest()


__all__ = ["AgenticDriver", "AgenticRequest"]

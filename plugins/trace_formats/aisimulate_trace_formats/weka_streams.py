"""Splitting a weka play's requests into streams (sessions) by their hash chains.

A recorded agent often runs helpers that share the play's top level (or a subagent's request
list) without being marked: their prompts do not extend the conversation the others extend.
The reference separates them by the prompts' hash ids (CLUSTER.md 5.2, "worker" streams), and
so do we, with its rules (observed on small traces, the rest from the public weka.rs):

* requests are taken in (t, entry index) order; a request whose hash ids start with the
  latest hash ids of a chain (same model, that request ended by this one's start) extends the
  chain with the longest such tail; otherwise it starts a new chain, forked from the chain whose
  tail shares the longest prefix with it (none: a disjoint chain);
* a request without hash ids joins the first chain;
* a *seam*: when a chain forked from a tail that nothing extended, and its first request starts
  after that tail ended with the same model, the fork with the deepest shared prefix (then the
  earliest, then the first made) continues the tail's chain instead;
* the chain whose first request comes first is the stream's main session, the others are
  ``:worker:<k>`` sessions in order of their first requests;
* a first request that shares no hash with any later one (and, if it asks for more than 64
  tokens, no hash id at all) is a *preamble*: it belongs to the main session but takes no part
  in the detection.
"""

from __future__ import annotations

import heapq

EPSILON_S = 1e-6            # the reference's slack on recorded times (seconds)
SEAM_MAX_GAP_S = 3600.0     # a longer pause is a seam only if it shares half of the tail
SEAM_MIN_OVERLAP = 0.5
PREAMBLE_MAX_OUTPUT = 64


class Item:
    """One request of a play: ``source_id`` ("outer:3", "outer:1:inner:0"), ``order`` (its
    index in its list), its canonical start ``t`` and recorded end (seconds)."""

    __slots__ = ("source_id", "order", "t", "end", "model", "hashes", "request")

    def __init__(self, source_id, order, t, request):
        self.source_id = source_id
        self.order = order
        self.t = t
        self.end = t + max(request.api_time or 0.0, 0.0)
        self.model = request.model
        self.hashes = tuple(request.hash_ids)
        self.request = request


def order_key(item):
    return (item.t, item.order, item.source_id)


def shared_prefix(left, right):
    n = 0
    for a, b in zip(left, right):
        if a != b:
            break
        n += 1
    return n


class Stream:
    __slots__ = ("session_id", "items", "fork_source", "scope")

    def __init__(self, session_id, items, fork_source, scope):
        self.session_id = session_id
        self.items = items                 # in order_key order
        self.fork_source = fork_source     # source_id of the request it was spawned from
        self.scope = scope                 # streams of one scope wait for each other's ends


class _Fork:
    __slots__ = ("parent", "source_id", "depth", "time")

    def __init__(self, parent, source_id, depth, time):
        self.parent = parent
        self.source_id = source_id
        self.depth = depth
        self.time = time


class _Chain:
    __slots__ = ("items", "fork", "spliced_into", "tail_id", "tail_hashes", "tail_end",
                 "tail_model")

    def __init__(self, fork=None):
        self.items = []
        self.fork = fork
        self.spliced_into = None
        self.tail_id = None
        self.tail_hashes = ()
        self.tail_end = 0.0
        self.tail_model = ""

    def append(self, item):
        if item.hashes:
            self.tail_id = item.source_id
            self.tail_hashes = item.hashes
            self.tail_end = item.end
            self.tail_model = item.model
        self.items.append(item)


def _extended(chains, item):
    """The chain whose tail this request extends (the longest tail), or None."""
    best, best_len = None, 0
    for index, chain in enumerate(chains):
        n = len(chain.tail_hashes)
        if (n == 0 or n > len(item.hashes) or n <= best_len or chain.tail_model != item.model
                or chain.tail_end > item.t + EPSILON_S or item.hashes[:n] != chain.tail_hashes):
            continue
        best, best_len = index, n
    return best


def _deepest(chains, hashes):
    """(chain, depth) of the tail sharing the longest prefix (then the longest tail)."""
    best, best_key = None, (0, 0)
    for index, chain in enumerate(chains):
        depth = shared_prefix(chain.tail_hashes, hashes)
        key = (depth, len(chain.tail_hashes))
        if depth > 0 and key > best_key:
            best, best_key = index, key
    return best, best_key[0]


def _chains(items):
    chains, chain_of, forks_at, by_id = [], {}, {}, {}
    for item in items:
        by_id[item.source_id] = item
        if not item.hashes:
            if not chains:
                chains.append(_Chain())
            chain_of[item.source_id] = 0
            chains[0].items.append(item)        # no hashes: not a tail
            continue
        target = None
        if not chains:
            chains.append(_Chain())
            target = 0
        else:
            target = _extended(chains, item)
            if target is None and all(not c.tail_hashes for c in chains):
                target = 0
        if target is None:
            parent, depth = _deepest(chains, item.hashes)
            source = chains[parent].tail_id if parent is not None else None
            target = len(chains)
            chains.append(_Chain(_Fork(parent, source, depth, item.t)))
            if source is not None:
                forks_at.setdefault(source, []).append(target)
        chain_of[item.source_id] = target
        chains[target].append(item)
    _splice_seams(chains, chain_of, forks_at, by_id)
    return chains


def _seam(chain, tail):
    fork = chain.fork
    if fork is None or fork.depth == 0 or not chain.items:
        return False
    first = chain.items[0]
    gap = first.t - tail.end
    overlap = fork.depth / max(len(tail.hashes), 1)
    return (tail.end <= first.t + EPSILON_S and first.model == tail.model
            and not (gap > SEAM_MAX_GAP_S and overlap < SEAM_MIN_OVERLAP))


def _splice_seams(chains, chain_of, forks_at, by_id):
    # fork points in source-id order; a splice can move a fork point, which is then revisited
    queue = sorted(forks_at)
    queued = set(queue)
    aliases, done = {}, set()
    while queue:
        source = heapq.heappop(queue)
        queued.discard(source)
        if source in done:
            continue
        done.add(source)
        owner = chain_of[source]
        while owner in aliases:
            owner = aliases[owner]
        if chains[owner].tail_id != source:
            continue                            # the tail was extended: no seam here
        tail = by_id[source]
        registered = [i for i in forks_at[source] if chains[i].spliced_into is None]
        seams = [i for i in registered if _seam(chains[i], tail)]
        if not seams:
            continue
        elected = max(seams, key=lambda i: (chains[i].fork.depth, -chains[i].fork.time, -i))
        keeper, moved = chains[owner], chains[elected]
        for item in moved.items:
            chain_of[item.source_id] = owner
        keeper.items.extend(moved.items)
        moved.items = []
        keeper.tail_id, keeper.tail_hashes = moved.tail_id, moved.tail_hashes
        keeper.tail_end, keeper.tail_model = moved.tail_end, moved.tail_model
        moved.spliced_into = owner
        aliases[elected] = owner
        new_tail = keeper.tail_id
        if new_tail is None:
            continue
        end_item = by_id[new_tail]
        for other in registered:               # the rival forks now fork from the new tail
            if other == elected or chains[other].spliced_into is not None:
                continue
            first = chains[other].items[0]
            if end_item.t > first.t + EPSILON_S:
                continue
            depth = shared_prefix(keeper.tail_hashes, first.hashes)
            if depth == 0:
                continue
            fork = chains[other].fork
            fork.parent, fork.source_id, fork.depth = owner, new_tail, depth
            forks_at.setdefault(new_tail, []).append(other)
            done.discard(new_tail)
            if new_tail not in queued:
                heapq.heappush(queue, new_tail)
                queued.add(new_tail)


def _preamble(items):
    """(preamble, the rest): a first request unrelated to every later one stands apart."""
    if len(items) < 2 or not items[0].hashes:
        return [], items
    first, rest = items[0], items[1:]
    if any(shared_prefix(first.hashes, other.hashes) > 0 for other in rest):
        return [], items
    if first.request.output_length > PREAMBLE_MAX_OUTPUT:
        later = {h for other in rest for h in other.hashes}
        if any(h in later for h in first.hashes):
            return [], items
    return [first], rest


def streams(namespace, prefix, items):
    """The streams of one request list: the main session first, then the workers."""
    preamble, rest = _preamble(sorted(items, key=order_key))
    live = [c for c in _chains(rest) if c.spliced_into is None]
    live.sort(key=lambda c: order_key(c.items[0]))
    scope = f"{namespace}:scope:{prefix}"
    out = []
    for k, chain in enumerate(live):
        members = chain.items + preamble if k == 0 else list(chain.items)
        # a splice appends a whole chain, which may interleave in time with what it joins
        members.sort(key=order_key)
        session = f"{namespace}:session:{prefix}" + (f":worker:{k - 1}" if k else "")
        fork = chain.fork.source_id if chain.fork is not None else None
        out.append(Stream(session, members, fork, scope))
    return out


__all__ = ["EPSILON_S", "Item", "Stream", "order_key", "streams"]

"""The running batch of an SGLang rank, kept arithmetically between lifecycle events.

Every running request emits one token in every decode pass and none in a prefill pass, so a
request's state follows from the rank's decode-pass counter ``D``: a member that joined when
``D`` was ``open_start`` with ``base_gen`` tokens generated has ``base_gen + D - open_start`` now.
Per decode pass the batch updates a handful of sums (sequence lengths, clipped remaining
outputs, page crossings) instead of touching each member; a member's fields are brought up to
date (``sync``) only when it leaves or when the rank must look at every member (retraction,
the exact admission sum). Members iterate in join order, which is SGLang's running order.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import islice


class RunningBatch:
    def __init__(self, page_size, clip):
        self.page_size = page_size
        self.clip = clip
        self.members = {}            # join number -> request, in join order
        self.D = 0                   # decode passes recorded so far
        self.dec_pass = array("q")   # rank pass index of each decode pass
        self.breaks = []             # decode indices d after which the next decode pass is not d's pass + 1
        self.sum_len = 0             # Σ sequence length (prompt + generated)
        self.crossings = [0] * page_size   # members by (len - D) mod page size
        self.finishing = {}          # decode index -> members emitting their last token there
        self.sum_small = 0           # Σ remaining output of members with remaining <= clip
        self.n_small = 0
        self.n_big = 0               # members whose remaining output is clipped
        self.unclip = {}             # decode index -> big members whose remaining reaches clip there
        # the inter-token gaps of finished members' last decode runs, as a difference array
        # over decode indices (d: the gap from decode pass d to d + 1), folded into the
        # rank's ITL once at the report (fold_spans): a run spans as many breaks as prefill
        # passes came meanwhile, and walking them per member cost more than the rest of it
        self.span_cover = {}

    def __len__(self):
        return len(self.members)

    def __bool__(self):
        return bool(self.members)

    def __iter__(self):
        return iter(self.members.values())

    # ------------------------------------------------------------------ membership
    def join(self, r, number):
        """Add ``r`` (its ``generated`` up to date) as member ``number``; it decodes from the
        next decode pass on."""
        D = self.D
        r.bucket_key = number
        r.open_start = D
        r.base_gen = r.generated
        r.in_stretch = True
        self.members[number] = r
        length = r.prompt_len + r.generated
        self.sum_len += length
        key = (length - D) % self.page_size
        r.pass_chunk = key
        self.crossings[key] += 1
        remaining = r.out_limit - r.generated
        last = D + remaining - 1
        bucket = self.finishing.get(last)
        if bucket is None:
            self.finishing[last] = [r]
        else:
            bucket.append(r)
        clip = self.clip
        if remaining > clip:
            self.n_big += 1
            at = D + remaining - clip - 1
            bucket = self.unclip.get(at)
            if bucket is None:
                self.unclip[at] = [r]
            else:
                bucket.append(r)
        else:
            self.n_small += 1
            self.sum_small += remaining

    def sync(self, r):
        """Bring a member's generated/computed/allocated counts up to the current pass."""
        generated = r.base_gen + self.D - r.open_start
        r.generated = generated
        length = r.prompt_len + generated
        r.computed = length
        ps = self.page_size
        r.held_blocks = -(-length // ps) * ps

    def leave(self, r):
        """Remove a member (synced); its decode emissions become closed stretches."""
        self.sync(r)
        D = self.D
        del self.members[r.bucket_key]
        self.sum_len -= r.prompt_len + r.generated
        self.crossings[r.pass_chunk] -= 1
        remaining = r.out_limit - r.generated
        if remaining > 0:
            _drop(self.finishing, D + remaining - 1, r)
        if remaining > self.clip:
            self.n_big -= 1
            _drop(self.unclip, D + remaining - self.clip - 1, r)
        else:
            self.n_small -= 1
            self.sum_small -= remaining
        r.in_stretch = False
        if D > r.open_start:
            stretches = r.stretches
            before = len(stretches)
            prev_last = stretches[-1][1] if before else -1
            self._close_stretches(r, r.open_start, D - 1)
            # (first, last decode index, stretches before, the last one's end then, after)
            r.itl_span = (r.open_start, D - 1, before, prev_last, len(stretches))
        else:
            r.itl_span = None

    def _close_stretches(self, r, first, last):
        dec_pass = self.dec_pass
        breaks = self.breaks
        stretches = r.stretches
        cuts = breaks[bisect_left(breaks, first):bisect_left(breaks, last)]
        if not cuts:
            self._add_stretch(stretches, dec_pass[first], dec_pass[last])
            return
        # one stretch per run between breaks (a break separates passes by definition, so
        # only the first run may continue the request's previous stretch)
        get = dec_pass.__getitem__
        ends = list(map(get, cuts))
        ends.append(dec_pass[last])
        starts = [dec_pass[first]]
        starts.extend(map(get, map((1).__add__, cuts)))
        self._add_stretch(stretches, starts[0], ends[0])
        stretches.extend(zip(islice(starts, 1, None), islice(ends, 1, None)))

    @staticmethod
    def _add_stretch(stretches, a, b):
        if stretches and stretches[-1][1] == a - 1:
            stretches[-1] = (stretches[-1][0], b)
        else:
            stretches.append((a, b))

    # ------------------------------------------------------------------ inter-token gaps
    def count_span(self, first, last):
        """Count the gaps of a finished member's decode run over decode indices first..last."""
        if last > first:
            cover = self.span_cover
            cover[first] = cover.get(first, 0) + 1
            cover[last] = cover.get(last, 0) - 1

    def fold_spans(self, diff, break_gaps):
        """Add the counted runs' gaps to a rank's per-pass difference array and break gaps
        (as their stretches would have: consecutive passes through ``diff``, a break between
        two decode passes as its pass pair), then forget them."""
        cover = self.span_cover
        if not cover:
            return
        self.span_cover = {}
        dp = self.dec_pass
        cuts = self.breaks
        points = sorted(cover)
        n = 0
        for i in range(len(points) - 1):
            a = points[i]
            n += cover[a]
            if not n:
                continue
            b = points[i + 1]          # gaps a .. b - 1: emissions in decode passes a .. b
            j = bisect_left(cuts, a)
            while j < len(cuts) and cuts[j] < b:
                c = cuts[j]
                if c > a:
                    diff[dp[a]] += n
                    diff[dp[c]] -= n
                key = (dp[c], dp[c + 1])
                break_gaps[key] = break_gaps.get(key, 0) + n
                a = c + 1
                j += 1
            if b > a:
                diff[dp[a]] += n
                diff[dp[b]] -= n

    # ------------------------------------------------------------------ per decode pass
    def growth(self):
        """KV tokens the next decode step needs: a page for each member starting one."""
        ps = self.page_size
        if ps == 1:
            return len(self.members)
        return ps * self.crossings[(-self.D) % ps]

    def clipped_remaining(self):
        """Σ over members of min(remaining output, clip)."""
        return self.sum_small + self.clip * self.n_big

    def record_decode(self, pass_index):
        """Every member emitted a token in this pass; returns those that emitted their last,
        in running order (still members)."""
        d = self.D
        dec_pass = self.dec_pass
        if d and dec_pass[d - 1] != pass_index - 1:
            self.breaks.append(d - 1)
        dec_pass.append(pass_index)
        self.D = d + 1
        self.sum_len += len(self.members)
        self.sum_small -= self.n_small
        unclipped = self.unclip.pop(d, None)
        if unclipped:
            k = len(unclipped)
            self.n_big -= k
            self.n_small += k
            self.sum_small += k * self.clip
        done = self.finishing.pop(d, None)
        if done and len(done) > 1:
            done.sort(key=_join_number)
        return done or ()

    def record_decodes(self, first_pass, count):
        """``record_decode`` for ``count`` consecutive decode passes numbered from
        ``first_pass``, at once; no member emits its last token in them (the caller knows:
        ``next_finish``)."""
        if count <= 0:
            return
        d = self.D
        dec_pass = self.dec_pass
        if d and dec_pass[d - 1] != first_pass - 1:
            self.breaks.append(d - 1)
        dec_pass.extend(range(first_pass, first_pass + count))
        end = d + count
        self.D = end
        self.sum_len += len(self.members) * count
        # each pass takes one token off every small member's remaining output; a big member
        # unclipped at decode index u counts as small from the pass after u on
        decrement = self.n_small * count
        unclip = self.unclip
        if unclip:
            clip = self.clip
            for u in [u for u in unclip if d <= u < end]:
                k = len(unclip.pop(u))
                self.n_big -= k
                self.n_small += k
                self.sum_small += k * clip
                decrement += k * (end - 1 - u)
        self.sum_small -= decrement

    def next_finish(self):
        """The first decode index (``D`` or later) in which a member emits its last token."""
        return min(self.finishing) if self.finishing else None


def _join_number(r):
    return r.bucket_key


def _drop(buckets, key, r):
    """Remove ``r`` from ``buckets[key]``; an emptied bucket goes (``next_finish`` reads keys)."""
    bucket = buckets[key]
    bucket.remove(r)
    if not bucket:
        del buckets[key]

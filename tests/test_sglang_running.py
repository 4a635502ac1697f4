"""The arithmetic running batch agrees with a per-request recount after random events."""

from __future__ import annotations

import random

from aisimulate_core.engine.request import SimRequest
from aisimulate_core.engine.sglang_running import RunningBatch
from aisimulate_core.workload.prompt import Prompt


def _request(rng, uuid):
    prompt = Prompt.from_tokens(range(rng.randint(1, 40)))
    r = SimRequest(uuid, prompt, rng.randint(1, 30), 0.0)
    r.generated = rng.randint(0, r.max_output - 1)
    return r


def test_running_batch_sums_match_a_recount():
    rng = random.Random(3)
    for ps in (1, 4):
        clip = rng.choice([3, 8, 100])
        batch = RunningBatch(ps, clip)
        shadow = {}                    # request -> generated, counted per pass
        emitted = {}                   # request -> pass indices with a decode token
        number = 0
        for pass_index in range(400):
            event = rng.random()
            if event < 0.2:
                number += 1
                r = _request(rng, number)
                batch.join(r, number)
                shadow[r] = r.generated
                emitted[r] = []
            elif event < 0.3 and shadow:
                r = rng.choice(list(shadow))
                batch.leave(r)
                assert r.generated == shadow.pop(r)
                passes = [p for a, b in r.stretches for p in range(a, b + 1)]
                assert passes == emitted.pop(r)
            elif event < 0.85 and shadow:
                done = batch.record_decode(pass_index)
                for r in shadow:
                    shadow[r] += 1
                    emitted[r].append(pass_index)
                expected = [r for r in batch if shadow[r] == r.out_limit]
                assert list(done) == expected
                for r in done:
                    batch.leave(r)
                    shadow.pop(r)
                    emitted.pop(r)
            # else: a pass without decode (a prefill pass): nobody emits
            members = list(batch)
            assert members == sorted(members, key=lambda r: r.bucket_key)
            assert batch.sum_len == sum(r.prompt_len + g for r, g in shadow.items())
            assert batch.clipped_remaining() == sum(min(r.out_limit - g, clip)
                                                    for r, g in shadow.items())
            growth = sum(ps for r, g in shadow.items() if (r.prompt_len + g) % ps == 0)
            assert batch.growth() == growth


def test_total_room_redoes_the_reservation_in_running_order_near_the_boundary():
    from aisimulate_core.engine.sglang_budget import PrefillBudget, TotalRoom

    batch = RunningBatch(1, 4096)
    for number in range(1, 11):
        r = SimRequest(number, Prompt.from_tokens([number]), 1, 0.0)
        batch.join(r, number)
    budget = PrefillBudget(16384, 8192, 4096, 1)
    # 1 * 0.1 summed ten times one by one is 0.9999999999999999, but 0.1 * 10 is 1.0: with one
    # token of room a zero-cost admission (a fully cached prompt, no output) fits only exactly
    assert 1.0 - batch.clipped_remaining() * 0.1 == 0.0
    room = TotalRoom(1, batch.clipped_remaining() * 0.1, lambda: budget.reserved_exact(batch, 0.1))
    assert room.admits(0)
    assert room.exact and room.value == 1.0 - 0.9999999999999999
    room.charge(0)
    assert not room.admits(1)


def _twin_batches(seed, ps, clip, members):
    """Two running batches joined by equal requests (one to step pass by pass, one at once)."""
    batches = []
    for _ in range(2):
        rng = random.Random(seed)
        batch = RunningBatch(ps, clip)
        for number in range(1, members + 1):
            batch.join(_request(rng, number), number)
        batches.append(batch)
    return batches


def _state(batch):
    return (batch.D, list(batch.dec_pass), batch.breaks, batch.sum_len, batch.sum_small,
            batch.n_small, batch.n_big, batch.crossings,
            {d: [r.uuid for r in rs] for d, rs in batch.unclip.items() if rs},
            {d: [r.uuid for r in rs] for d, rs in batch.finishing.items() if rs})


def test_a_run_of_decode_passes_at_once_equals_one_by_one():
    rng = random.Random(11)
    for trial in range(200):
        ps, clip = rng.choice([1, 4]), rng.choice([2, 5, 100])
        stepped, at_once = _twin_batches(trial, ps, clip, rng.randint(1, 12))
        start = rng.choice([0, 5])
        gap = rng.choice([1, 2])             # 2: a prefill pass before the run (a break)
        for batch in (stepped, at_once):
            for r in batch.record_decode(start):
                batch.leave(r)
        if not stepped:
            continue
        count = stepped.next_finish() - stepped.D     # the passes before a last token
        for offset in range(count):
            assert stepped.record_decode(start + gap + offset) == ()
        at_once.record_decodes(start + gap, count)
        assert _state(at_once) == _state(stepped)


def test_refused_passes_agree_with_admission_pass_by_pass():
    from aisimulate_core.engine.sglang_budget import (PrefillBudget, RatioSchedule, TotalRoom,
                                                      refused_passes)

    rng = random.Random(5)
    refused_some = admitted_some = 0
    for trial in range(300):
        ps, clip = rng.choice([1, 2]), rng.choice([3, 20, 4096])
        batch, _ = _twin_batches(trial, ps, clip, rng.randint(1, 10))
        ratio = RatioSchedule(rng.choice([0.3, 1.0]))
        for _ in range(rng.randint(0, 700)):
            ratio.decay()
        budget = PrefillBudget(16384, 8192, clip, ps)
        capacity = rng.randint(0, 400)
        room = rng.randint(0, capacity)
        cost = rng.randint(1, 200)
        rounds = rng.choice([0, 0, 2])
        passes = batch.next_finish() - batch.D + 1
        got = refused_passes(batch, ratio, passes=passes, room=room, capacity=capacity,
                             cost=cost, rounds_left=rounds)
        # the same passes formed one by one: the head is priced unless the round is deferred
        expected = passes
        for k in range(passes):
            need = batch.growth()
            if need > room:
                expected = k
                break
            if k >= rounds:
                value = ratio.value
                total = TotalRoom(capacity, batch.clipped_remaining() * value,
                                  lambda: budget.reserved_exact(batch, value))
                if total.admits(cost) or total.exact:
                    expected = k
                    break
            room -= need
            capacity -= need
            batch.record_decode(k)
            ratio.decay()
        assert got == expected, trial
        refused_some += got > 0
        admitted_some += got < passes
    assert refused_some > 50 and admitted_some > 50

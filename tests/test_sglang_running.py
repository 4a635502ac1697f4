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

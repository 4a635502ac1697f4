"""Writes traces/demo_conversation.jsonl: a small Mooncake-format trace made up for the demo.

Shape of a chat service in miniature: 12 system prompts shared by many users, conversations
that grow turn by turn (a turn re-sends the whole history, so its hash ids extend the previous
turn's), Poisson arrivals of new conversations over two minutes. 512-token blocks, as Mooncake.
Run: python3 examples/make_demo_trace.py
"""

import json
import random
from pathlib import Path

BLOCK = 512


def main():
    rng = random.Random(20261130)
    next_id = 1000
    system_prompts = []
    for _ in range(12):
        n = rng.randint(1, 4)
        system_prompts.append(list(range(next_id, next_id + n)))
        next_id += n
    rows = []
    t = 0.0
    for conversation in range(120):
        t += rng.expovariate(1.0) * 1000.0
        history = list(rng.choice(system_prompts))
        turn_time = t
        for turn in range(rng.randint(1, 4)):
            new_blocks = rng.randint(1, 6)
            history.extend(range(next_id, next_id + new_blocks))
            next_id += new_blocks
            input_length = len(history) * BLOCK - rng.randint(0, BLOCK - 1)
            rows.append({"timestamp": round(turn_time), "input_length": input_length,
                         "output_length": rng.randint(20, 600), "hash_ids": list(history)})
            turn_time += rng.uniform(5_000, 30_000)
            history.append(next_id)  # the reply becomes context of the next turn
            next_id += 1
    rows.sort(key=lambda row: row["timestamp"])
    out = Path(__file__).parent / "traces" / "demo_conversation.jsonl"
    out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"wrote {len(rows)} rows to {out}")


if __name__ == "__main__":
    main()

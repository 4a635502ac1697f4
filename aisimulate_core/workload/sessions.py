"""The in-memory trace every workload lowers to: sessions of turns (SEMANTICS 1, 5).

A turn's prompt is given by hash ids at ``block_size`` granularity; raw ids are interned to
dense canonical ids in first-seen order across the whole trace, and each id stands for
``block_size`` copies of itself as tokens.
"""

from __future__ import annotations

from ..engine.request import SimRequest
from .prompt import Prompt


class Turn:
    __slots__ = ("input_length", "max_output_tokens", "hash_ids", "delay_ms", "request_id",
                 "output_token_ids", "metadata", "priority")

    def __init__(self, input_length, max_output_tokens, hash_ids, delay_ms=0.0, *,
                 request_id=None, output_token_ids=None, metadata=None, priority=0):
        self.input_length = input_length
        self.max_output_tokens = max_output_tokens
        self.hash_ids = hash_ids          # canonical (interned) ids
        self.delay_ms = delay_ms          # think time after the previous turn completed
        self.request_id = request_id
        self.output_token_ids = output_token_ids
        self.metadata = metadata
        self.priority = priority


class Session:
    """Full-prompt session: every turn carries its whole prompt."""

    __slots__ = ("session_id", "start_ms", "turns", "block_size", "named")

    def __init__(self, session_id, start_ms, turns, block_size, *, named=True):
        self.session_id = session_id
        self.start_ms = start_ms
        self.turns = turns
        self.block_size = block_size
        self.named = named                # False: a row without session id (placement sees none)

    def prompt_for(self, turn_index):
        turn = self.turns[turn_index]
        return Prompt.from_hash_ids(turn.hash_ids, turn.input_length, self.block_size)

    def make(self, turn_index, now_ms):
        turn = self.turns[turn_index]
        return SimRequest(
            0, self.prompt_for(turn_index), turn.max_output_tokens, now_ms,
            request_id=turn.request_id,
            session_id=self.session_id if self.named else None,
            turn_index=turn_index if self.named else None,
            metadata=turn.metadata,
            output_token_ids=turn.output_token_ids,
            driver_ref=(self, turn_index))

    def on_turn_completed(self, request, turn_index):
        pass


class Interner:
    """Raw hash ids (any int) to dense u32 ids in first-seen order."""

    __slots__ = ("ids",)

    def __init__(self):
        self.ids = {}

    def __call__(self, raw):
        ids = self.ids
        out = []
        for key in raw:
            value = ids.get(key)
            if value is None:
                value = len(ids)
                ids[key] = value
            out.append(value)
        return out

"""Explicit requests of a bare ReplaySpec (`requests`), SEMANTICS.md §3.1."""

from typing import Any

import attrs


@attrs.frozen(kw_only=True)
class ReplayRequest:
    """One authored request. `input_token_ids`, when given, has `input_tokens` entries;
    `output_token_ids`, when given, fixes the generated tokens. `metadata` is kept as
    authored; its keys `priority`, `strict_priority`, `policy_class` are routing metadata."""

    id: str
    arrival_time_ms: float
    input_tokens: int
    input_token_ids: tuple[int, ...] | None = None
    output_tokens: int
    output_token_ids: tuple[int, ...] | None = None
    dp_rank: int | None = None
    prefill_dp_rank: int | None = None
    session_id: str | None = None
    turn_index: int | None = None
    metadata: Any = None

    @property
    def priority(self) -> int:
        return self.metadata.get("priority", 0) if isinstance(self.metadata, dict) else 0

    @property
    def strict_priority(self) -> int:
        return self.metadata.get("strict_priority", 0) if isinstance(self.metadata, dict) else 0

    @property
    def policy_class(self) -> str | None:
        return self.metadata.get("policy_class") if isinstance(self.metadata, dict) else None


__all__ = ["ReplayRequest"]

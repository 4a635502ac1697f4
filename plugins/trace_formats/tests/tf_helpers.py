"""Shared helpers of the trace-format tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from aisimulate_core.errors import TraceError

ROOT = Path(__file__).resolve().parents[3]
TRACES = "tests/fixtures/traces/"


def load(fmt, *paths, trace_block_size=16):
    """Load fixture traces by their project-relative path (messages name it so)."""
    return fmt().load(tuple(TRACES + p for p in paths), trace_block_size=trace_block_size)


def load_text(tmp_path, monkeypatch, fmt, text, *, trace_block_size=4, name="t.jsonl"):
    """Write ``text`` as ``t.jsonl`` in a scratch directory and load it from there."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(text)
    return fmt().load((name,), trace_block_size=trace_block_size)


def error_of(tmp_path, monkeypatch, fmt, text, **kwargs):
    with pytest.raises(TraceError) as info:
        trace = load_text(tmp_path, monkeypatch, fmt, text, **kwargs)
        validate = getattr(trace, "sessions", None)
        if validate is not None:  # the core's turn rules, as lowering applies them
            from aisimulate_core.workload.trace import validate_trace
            validate_trace(trace)
    return str(info.value)


def turns(session):
    return [(t.input_length, t.max_output_tokens, list(t.hash_ids), t.delay_ms)
            for t in session.turns]


def deps(node):
    return [(d.request_id, d.trigger, d.delay_ms, d.relation) for d in node.dependencies]

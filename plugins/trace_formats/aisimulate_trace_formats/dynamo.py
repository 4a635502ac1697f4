"""``dynamo``: Dynamo request traces (``dynamo.request.trace.v1``), SEMANTICS.md 1.5.

Files are ``.jsonl`` or ``.jsonl.gz`` and there may be several (``dynamo_records`` decodes
them). Requests sort by (start, end, id) and share the block size embedded in
``replay.trace_block_size``; a payload's ``trace_block_size`` must equal it.

Without ``agent_context`` the trace is *standard*: every request becomes a one-turn session
arriving at its start, like a Mooncake row. With it (on every request) the trace is agentic
(``dynamo_agentic``).
"""

from __future__ import annotations

from aisimulate_core.workload.formats import TraceFormat

from .dynamo_agentic import lower_agentic
from .dynamo_records import Entry, block_size_of, check_prompt, load_entries, output_length
from .mooncake import MooncakeBuilder
from .rows import fail, model_block_size


def lower_standard(entries, block):
    first_start = min(e.start_ms for e in entries)
    builder = MooncakeBuilder(block)
    for ordinal, entry in enumerate(entries, 1):
        check_prompt(entry, block, exact=False)
        replay = entry.request.replay
        builder.add(entry.where, ordinal, None, replay.input_length, output_length(entry),
                    replay.input_sequence_hashes, timestamp=float(entry.start_ms - first_start))
    return builder.trace()


class Dynamo(TraceFormat):
    NAME = "dynamo"

    def load(self, paths, *, trace_block_size):
        entries, tools = load_entries(paths)
        with_context = sum(e.context is not None for e in entries)
        if with_context and with_context != len(entries):
            mixed = next(e for e in entries if e.context is None)
            fail(mixed.where, "agent_context", "is missing, but other requests have one: a "
                 "trace is either agentic (every request) or standard (none)")
        block = model_block_size(block_size_of(entries, trace_block_size))
        entries.sort(key=Entry.order)
        if with_context:
            return lower_agentic(entries, tools, block)
        return lower_standard(entries, block)


__all__ = ["Dynamo", "lower_standard"]

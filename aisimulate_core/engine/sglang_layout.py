"""The instance layout both SGLang ranks share, the C rank's (engine/sglang_native.py) and the
Python one's (engine/sglang.py): a watched C rank becomes its Python twin in place, by a class
assignment, which CPython allows only between classes of one layout.

The C rank's attributes are slots: past 30 instance attributes CPython 3.11 keeps them in a
dict of their own, and then no ``self.method()`` of the rank specializes. ``__dict__`` stays
for the rest (a role's, a caller's, the Python rank's many). The Python rank's class defaults
of these names (RankBase's ``pass_effect``, ...) come before the slots in its lookup, so it
keeps them as class defaults and dict entries, as without the slots.
"""

from __future__ import annotations


class SglangLayout:
    __slots__ = ("__dict__", "__weakref__",
                 "_args", "worker_idx", "dp_rank", "scheduler_id", "timer", "cb", "page_size",
                 "total_kv_tokens", "caching", "max_running", "max_model_len", "lpm", "budget",
                 "chunk_setting", "num_blocks", "interval", "_rank", "_view", "_i64", "_i32",
                 "_f64", "cache", "pool", "_decode_timing", "_requests", "_submitted",
                 "running", "waiting", "ratio", "pass_ends", "_break_gaps", "_breaks_read",
                 "pass_end_ms", "_macro_ends", "_ends_finishing", "pass_effect", "stuck",
                 "_prefill_charged", "_sets_idle_pass")

    def _clear_slots(self):
        """Unset every slot (the C rank's state, before its twin's __init__ runs)."""
        for name in SglangLayout.__slots__[2:]:
            try:
                _SLOTS[name].__delete__(self)
            except AttributeError:   # (never set)
                pass


_SLOTS = {name: SglangLayout.__dict__[name] for name in SglangLayout.__slots__[2:]}

"""workload/columns.made: sessions and turns made from columns are those their constructors
make, and a column set that is not the class's slots is refused (nothing left unset)."""

from __future__ import annotations

from array import array

import pytest

from aisimulate_core.workload.columns import made
from aisimulate_core.workload.trace import Session, Turn


def fields(obj):
    return [(name, getattr(obj, name)) for name in type(obj).__slots__]


def test_turns_made_from_columns_are_the_constructors_turns():
    built = [Turn(5, 2, array("I", [1, 2]), 0.0, where="t:1"),
             Turn(3, 1, [7], 1.5, output_token_ids=[4], priority=-2, strict_priority=1,
                  policy_class="batch", where="t:2")]
    columns = {name: [getattr(t, name) for t in built] for name in Turn.__slots__}
    assert [fields(t) for t in made(Turn, 2, columns)] == [fields(t) for t in built]
    session = Session("a", 3.0, built, where="t:1")
    again = made(Session, 1, {"session_id": ["a"], "start_ms": [3.0], "turns": [built],
                              "where": ["t:1"]})
    assert [fields(s) for s in again] == [fields(session)]


def test_columns_must_be_the_slots():
    with pytest.raises(TypeError, match="Session columns"):
        made(Session, 1, {"session_id": ["a"], "start_ms": [3.0], "turns": [[]]})
    with pytest.raises(TypeError):
        made(Session, 1, {"session_id": ["a"], "start_ms": [3.0], "turns": [[]], "where": [None],
                          "extra": [1]})

"""``--set PATH=VALUE``: changes to a payload document before it is validated.

``PATH`` names a place in the payload's JSON as the error messages do, without the ``$``:
``spec.topology.workers.initial_workers``, ``spec.requests[0].output_tokens``,
``spec.adapters.placement.config["odd key"]`` (a leading ``$.`` is accepted). Objects missing
on the way (or null) are created; a list index must exist. ``VALUE`` is JSON (``4``, ``true``,
``null``, ``{"type": "fixed", "prefill_ms": 10}``, ``"4"`` for the string); text that is not
JSON and does not start like JSON (a digit, ``-``, ``"``, ``[`` or ``{``) is taken as a string,
so ``backend=sglang`` and ``trace_path=../trace.jsonl`` need no quotes, while ``1e`` or
``[1,`` are errors. The overridden document is validated like any payload, and each problem
at (or inside, or above) an overridden path names the override that caused it:

    --set spec.topology.workers.initial_workers=0: $.spec.topology.workers.initial_workers: must be > 0, got 0

Used by ``aisimulate run --set`` and by every point of ``aisimulate sweep``.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any, Iterable, Iterator

import attrs

from aisimulate_core.errors import AisimError, ConfigError
from aisimulate_core.messages import escape_controls, problem_lines

# a segment: .name / name at the start, [N], or ["quoted key"]
_SEGMENT = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')
_JSON_START = set('{["-0123456789')
_PROBLEM_PATH = re.compile(r"(\$(?:\.[A-Za-z_][A-Za-z0-9_-]*|\[\d+\]|\[\"(?:[^\"\\]|\\.)*\"\])*): ")


class OverrideError(ConfigError):
    """A ``--set`` that cannot be parsed or applied; the message starts with the override."""


@attrs.frozen
class Override:
    """One ``PATH=VALUE``: ``keys`` are object keys (str) and list indices (int)."""

    text: str  # as given, for messages
    keys: tuple
    value: Any
    source: str = "--set"  # what messages call it: "--set", or a sweep's "axis" / "set"

    @property
    def json_path(self) -> str:
        """The path as validation messages write it: ``$.spec.topology``, ``$.requests[0]``."""
        return json_path(self.keys)

    @property
    def label(self) -> str:
        return f"{self.source} {escape_controls(self.text)}"

    @property
    def dotted(self) -> str:
        """The path as given in a sweep ledger: ``spec.topology.workers.initial_workers``."""
        return json_path(self.keys)[2:] if self.keys else ""


def json_path(keys: Iterable) -> str:
    from aisimulate_core.spec.converter import key_path

    return "$" + "".join(f"[{key}]" if isinstance(key, int) else key_path(key) for key in keys)


def parse_path(path: str) -> tuple:
    """``spec.a[0].b`` -> ``("spec", "a", 0, "b")``; ValueError naming the problem."""
    text = path[2:] if path.startswith("$.") else path
    if not text:
        raise ValueError("the path is empty")
    keys: list = []
    at = 0
    while at < len(text):
        match = _SEGMENT.match(text, at)
        if match is None or (at > 0 and match.group(1) is not None and text[at] != "."):
            raise ValueError(f"cannot read the path at {text[at:]!r} (write keys as a.b, "
                             'indices as [0], other keys as ["key"])')
        if at == 0 and text[0] == ".":
            raise ValueError("the path starts with '.'")
        name, index, quoted = match.groups()
        keys.append(name if name is not None else int(index) if index is not None
                    else json.loads(quoted))
        at = match.end()
    return tuple(keys)


def parse_value(text: str) -> Any:
    """JSON, else the text itself when it does not start like JSON; ValueError otherwise."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except ValueError as error:
        stripped = text.strip()
        if not stripped:
            raise ValueError('needs a value (write "" for an empty string)') from None
        if stripped[0] in _JSON_START:
            reason = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
            raise ValueError(f"not valid JSON: {reason}") from None
        return text


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_override(text: str) -> Override:
    """One ``PATH=VALUE`` (the first ``=`` ends the path); OverrideError naming it."""
    path, sep, value = text.partition("=")
    label = f"--set {escape_controls(text)}"
    if not sep:
        raise OverrideError(f"{label}: expected PATH=VALUE")
    try:
        keys = parse_path(path.strip())
    except ValueError as error:
        raise OverrideError(f"{label}: {escape_controls(str(error))}") from None
    try:
        parsed = parse_value(value)
    except ValueError as error:
        raise OverrideError(f"{label}: {escape_controls(str(error))}") from None
    return Override(text, keys, parsed)


def parse_overrides(texts: Iterable[str] | None) -> list[Override]:
    """Every ``--set``, all problems at once (one line each)."""
    overrides, problems = [], []
    for text in texts or ():
        try:
            overrides.append(parse_override(text))
        except OverrideError as error:
            problems.append(str(error))
    if problems:
        raise OverrideError("\n".join(problems))
    return overrides


def override_from(path: str, value: Any, source: str = "--set") -> Override:
    """An override from a path and an already parsed value (a sweep's axis point)."""
    try:
        keys = parse_path(path)
    except ValueError as error:
        raise OverrideError(f"{escape_controls(path)}: {escape_controls(str(error))}") from None
    shown = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return Override(f"{path}={shown}", keys, value, source)


def apply_overrides(document: Any, overrides: Iterable[Override]) -> Any:
    """A copy of the parsed payload ``document`` with every override applied in order."""
    overrides = list(overrides)
    if not overrides:
        return document
    result = _copy(document)
    for override in overrides:
        result = _apply(result, override)
    return result


def _copy(value: Any) -> Any:
    if type(value) is dict:
        return {key: _copy(item) for key, item in value.items()}
    if type(value) is list:
        return [_copy(item) for item in value]
    return value


def _apply(document: Any, override: Override) -> Any:
    if not override.keys:
        return _copy(override.value)
    node = document
    for depth, key in enumerate(override.keys):
        last = depth == len(override.keys) - 1
        where = json_path(override.keys[:depth])
        if isinstance(key, int):
            if type(node) is not list:
                raise OverrideError(f"{override.label}: {where} is {_kind(node)}, not a list")
            if key >= len(node):
                raise OverrideError(f"{override.label}: {where} has {len(node)} items, "
                                    f"no index {key}")
        elif type(node) is not dict:
            raise OverrideError(f"{override.label}: {where} is {_kind(node)}, not an object")
        if last:
            node[key] = _copy(override.value)
        else:
            child = node[key] if isinstance(key, int) else node.get(key)
            if child is None and not isinstance(override.keys[depth + 1], int):
                child = node[key] = {}
            node = child
    return document


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def attribute(message: str, overrides: Iterable[Override]) -> str:
    """``message`` with each ``$.path: rule`` line at, inside or above an overridden path
    prefixed by that override (the last one when several match)."""
    overrides = list(overrides)
    if not overrides:
        return message
    lines = []
    for line in problem_lines(message):
        match = _PROBLEM_PATH.match(line)
        owner = None
        if match is not None:
            path = match.group(1)
            for override in overrides:
                if _related(path, override.json_path):
                    owner = override
        lines.append(f"{owner.label}: {line}" if owner is not None else line)
    return "\n".join(lines)


def _related(problem: str, overridden: str) -> bool:
    if problem == overridden:
        return True
    inner, outer = (problem, overridden) if len(problem) > len(overridden) else (overridden, problem)
    return inner.startswith(outer) and inner[len(outer)] in ".[" and outer != "$"


@contextlib.contextmanager
def naming_overrides(overrides: Iterable[Override]) -> Iterator[None]:
    """An AisimError raised inside names the overrides its problems come from."""
    overrides = list(overrides)
    try:
        yield
    except AisimError as error:
        if overrides and error.args and isinstance(error.args[0], str):
            message = attribute(error.args[0], overrides)
            if message != error.args[0]:
                error.args = (message, *error.args[1:])
                if hasattr(error, "problems"):
                    error.problems = tuple(message.split("\n"))
        raise


def load_with_overrides(document: Any, overrides: Iterable[Override]):
    """``load_payload`` of the overridden document (text or parsed), errors naming overrides."""
    from aisimulate_core.spec import load_payload
    from aisimulate_core.spec.load import parse_json

    overrides = list(overrides)
    if not overrides:
        return load_payload(document)
    if isinstance(document, (str, bytes, bytearray)):
        document = parse_json(document)
    with naming_overrides(overrides):
        return load_payload(apply_overrides(document, overrides))


__all__ = ["Override", "OverrideError", "apply_overrides", "attribute", "load_with_overrides",
           "naming_overrides", "override_from", "parse_override", "parse_overrides",
           "parse_path", "parse_value"]

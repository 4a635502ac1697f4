"""The one cattrs converter of the payload, strict on JSON types, and its error reporting.

Structuring is phase one of loading: JSON types, enum values, unknown and missing fields,
aliases. Every failure becomes one `(path, rule)` pair; the paths are JSONPath-like
(`$.spec.engine.rank.block_size`, `$.spec.requests[3].id`). Value rules are phase two
(validate.py) and run on the structured objects.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import typing
from typing import Any, Callable, Iterable, Literal

import attrs
import cattrs
import msgspec
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn

from aisimulate_core.errors import ConfigError
from aisimulate_core.messages import escape_controls

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_PATH_TOKEN = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[(\"(?:[^\"\\]|\\.)*\")\]")


class Problem(ValueError):
    """One broken rule at `field` (a path fragment such as `.kind` or `[2]`) below the
    object being structured."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def show(value: Any, limit: int = 60) -> str:
    """The value as it would appear in JSON, shortened for one-line messages."""
    if isinstance(value, float) and not math.isfinite(value):
        text = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=True)
        except (TypeError, ValueError):
            text = repr(value)
    text = escape_controls(text)  # one problem stays one line whatever the value holds
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def key_path(key: Any) -> str:
    """Path fragment for an object key: `.name`, or `["odd key"]`."""
    key = str(key)
    if _IDENTIFIER.match(key):
        return "." + key
    return "[" + escape_controls(json.dumps(key, ensure_ascii=False)) + "]"


def path_sort_key(path: str) -> tuple:
    """Orders paths field by field, array indices numerically (`[2]` before `[10]`)."""
    parts: list[tuple[int, Any]] = []
    for name, index, quoted in _PATH_TOKEN.findall(path):
        if index:
            parts.append((1, int(index)))
        else:
            parts.append((0, name or quoted))
    return tuple(parts)


def unknown_field_message(key: str, candidates: Iterable[str], hints: dict[str, str] | None = None) -> str:
    hint = (hints or {}).get(key)
    if hint is None:
        close = difflib.get_close_matches(key, sorted(set(candidates)), n=1, cutoff=0.7)
        hint = close[0] if close else None
    if hint is None:
        return "unknown field"
    return f"unknown field (did you mean '{hint}'?)"


def one_of(values: Iterable[Any]) -> str:
    return ", ".join(f"'{v}'" for v in values)


# -- primitive hooks: JSON types, no coercion -------------------------------------------


def _structure_int(value: Any, _: Any) -> int:
    if type(value) is not int:
        raise Problem(f"expected an integer, got {show(value)}")
    # Every integer field of the payload is unsigned in the reference (usize/u32/u64).
    if value < 0:
        raise Problem(f"must be >= 0, got {value}")
    if value > U64_MAX:
        raise Problem(f"must be <= {U64_MAX}, got {value}")
    return value


def _structure_float(value: Any, _: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            raise Problem(f"must be a 64-bit float, got {show(value)}") from None
    raise Problem(f"expected a number, got {show(value)}")


def _structure_str(value: Any, _: Any) -> str:
    if type(value) is not str:
        raise Problem(f"expected a string, got {show(value)}")
    return value


def _structure_bool(value: Any, _: Any) -> bool:
    if type(value) is not bool:
        raise Problem(f"expected a boolean, got {show(value)}")
    return value


def _literal_factory(tp: Any) -> Callable[[Any, Any], Any]:
    allowed = typing.get_args(tp)

    def structure(value: Any, _: Any) -> Any:
        if type(value) is not str or value not in allowed:
            raise Problem(f"must be one of {one_of(allowed)}, got {show(value)}")
        return value

    return structure


_TokenIds = tuple[typing.Annotated[int, msgspec.Meta(ge=0, le=U32_MAX)], ...]


def _structure_token_ids(value: Any, _: Any) -> tuple[int, ...]:
    # Token-id arrays can be long: msgspec checks them in C; the loop only finds the culprit.
    if type(value) is not list:
        raise Problem(f"expected an array, got {show(value)}")
    try:
        return msgspec.convert(value, _TokenIds)
    except msgspec.ValidationError:
        pass
    for index, x in enumerate(value):
        if type(x) is not int:
            raise Problem(f"expected an integer, got {show(x)}", f"[{index}]")
        if not 0 <= x <= U32_MAX:
            raise Problem(f"must be a token id in [0, {U32_MAX}], got {x}", f"[{index}]")
    raise AssertionError("unreachable")


def _is_homogeneous_tuple(tp: Any) -> bool:
    args = typing.get_args(tp)
    return typing.get_origin(tp) is tuple and len(args) == 2 and args[1] is Ellipsis


def _tuple_factory(tp: Any) -> Callable[[Any, Any], tuple]:
    element = typing.get_args(tp)[0]
    if element is int:  # the payload's only integer arrays are token ids
        return _structure_token_ids
    inner = converter.get_structure_hook(element)

    def structure(value: Any, _: Any) -> tuple:
        if type(value) is not list:
            raise Problem(f"expected an array, got {show(value)}")
        items: list[Any] = []
        errors: list[Exception] = []
        for index, item in enumerate(value):
            try:
                items.append(inner(item, element))
            except Exception as exc:  # collected and reported with the index
                exc.__notes__ = [*getattr(exc, "__notes__", []), IterableValidationNote(f"@ index {index}", index, element)]
                errors.append(exc)
        if errors:
            raise IterableValidationError(f"While structuring {tp}", errors, tp)
        return tuple(items)

    return structure


# -- attrs classes: object check, aliases, per-class preprocessing ------------------------


@attrs.define
class _ObjectRule:
    preprocess: Callable[[dict[str, Any]], tuple[dict[str, Any], list[Problem]]] | None = None
    aliases: dict[str, str] = attrs.Factory(dict)


_rules: dict[type, _ObjectRule] = {}


def register_object(
    cls: type,
    *,
    preprocess: Callable[[dict[str, Any]], tuple[dict[str, Any], list[Problem]]] | None = None,
    aliases: dict[str, str] | None = None,
) -> None:
    """Declare how the JSON object for `cls` is prepared before generic structuring.

    `aliases` maps an accepted alternative key to its canonical field; giving both is an
    error. `preprocess` receives a private copy of the object and returns it (possibly
    changed) with any problems it found.
    """
    _rules[cls] = _ObjectRule(preprocess, dict(aliases or {}))


def field_names(cls: type) -> list[str]:
    names = [a.name for a in attrs.fields(cls) if a.init]
    rule = _rules.get(cls)
    if rule is not None:
        names.extend(rule.aliases)
    return names


def _attrs_factory(cls: type) -> Callable[[Any, Any], Any]:
    generated = make_dict_structure_fn(cls, converter)
    rule = _rules.get(cls, _ObjectRule())

    def structure(value: Any, _: Any) -> Any:
        if type(value) is not dict:
            raise Problem(f"expected an object, got {show(value)}")
        data = dict(value)
        problems: list[Exception] = []
        for alias, canonical in rule.aliases.items():
            if alias in data:
                if canonical in data:
                    problems.append(Problem(f"cannot be given together with '{canonical}' (same field)", key_path(alias)))
                    del data[alias]
                else:
                    data[canonical] = data.pop(alias)
        if rule.preprocess is not None:
            data, found = rule.preprocess(data)
            problems.extend(found)
        try:
            result = generated(data, cls)
        except ClassValidationError as exc:
            problems.extend(exc.exceptions)
        except ForbiddenExtraKeysError as exc:
            problems.append(exc)
        if problems:
            raise ClassValidationError(f"While structuring {cls.__name__}", problems, cls)
        return result

    return structure


def register_tagged_union(union: Any, tag: str, classes: dict[str, type], default: str | None = None) -> None:
    """Structure `union` by the value of its `tag` key (like serde's internally tagged enums)."""

    def structure(value: Any, _: Any) -> Any:
        if type(value) is not dict:
            raise Problem(f"expected an object, got {show(value)}")
        name = value.get(tag, default)
        if tag not in value and default is None:
            raise Problem("is required", key_path(tag))
        if type(name) is not str or name not in classes:
            raise Problem(f"must be one of {one_of(classes)}, got {show(name)}", key_path(tag))
        cls = classes[name]
        return converter.get_structure_hook(cls)(value, cls)

    converter.register_structure_hook(union, structure)


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook(int, _structure_int)
    conv.register_structure_hook(float, _structure_float)
    conv.register_structure_hook(str, _structure_str)
    conv.register_structure_hook(bool, _structure_bool)
    conv.register_structure_hook_factory(lambda t: typing.get_origin(t) is Literal, _literal_factory)
    conv.register_structure_hook_factory(_is_homogeneous_tuple, _tuple_factory)
    conv.register_structure_hook_factory(attrs.has, _attrs_factory)
    conv.register_unstructure_hook_factory(attrs.has, _unstructure_factory)
    return conv


def _unstructure_factory(cls: type) -> Callable[[Any], dict[str, Any]]:
    fields = [field for field in attrs.fields(cls) if field.init]   # not a memo

    def unstructure(obj: Any) -> dict[str, Any]:
        # Absent and null mean the same for every optional field, so `None` is omitted.
        out: dict[str, Any] = {}
        for field in fields:
            value = getattr(obj, field.name)
            if value is not None:
                out[field.name] = converter.unstructure(value)
        return out

    return unstructure


# -- error collection ---------------------------------------------------------------------


def _suffix(exc: BaseException) -> str:
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, AttributeValidationNote):
            return key_path(note.name)
        if isinstance(note, IterableValidationNote):
            return f"[{note.index}]"
    return ""


def collect(exc: BaseException, path: str, out: list[tuple[str, str]]) -> None:
    """Flatten a structuring failure into `(path, rule)` pairs."""
    if isinstance(exc, Problem):
        out.append((path + exc.field, exc.message))
    elif isinstance(exc, ForbiddenExtraKeysError):
        candidates = field_names(exc.cl)
        for key in sorted(exc.extra_fields):
            out.append((path + key_path(key), unknown_field_message(key, candidates)))
    elif isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            collect(sub, path + _suffix(sub), out)
    elif isinstance(exc, KeyError):
        out.append((path, "is required"))
    else:
        out.append((path, f"invalid value ({exc})"))


def structure(data: Any, cls: Any, root: str) -> tuple[Any, list[tuple[str, str]]]:
    """Structure `data` as `cls`; returns the object, or None and the problems."""
    try:
        return converter.structure(data, cls), []
    except Exception as exc:
        problems: list[tuple[str, str]] = []
        collect(exc, root, problems)
        return None, problems


def raise_problems(problems: list[tuple[str, str]]) -> None:
    """Raise one ConfigError listing every problem, one line each, ordered by path."""
    if not problems:
        return
    unique = list(dict.fromkeys(problems))
    unique.sort(key=lambda p: path_sort_key(p[0]))
    lines = [f"{path}: {rule}" for path, rule in unique]
    error = ConfigError("\n".join(lines))
    error.problems = tuple(lines)  # type: ignore[attr-defined]
    raise error


converter = _make_converter()

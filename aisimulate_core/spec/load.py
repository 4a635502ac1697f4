"""`load_payload`: JSON text or a parsed document to a validated `Payload`; and back."""

import json
import re
from typing import Any

import attrs
import msgspec

from .converter import converter, raise_problems, show, structure
from .replay import Payload, ReplaySpec
from .support import unsupported
from .traffic import DEFAULT_TRACE_BLOCK_SIZE, EMBEDDED_BLOCK_SIZE_FORMATS, SyntheticTraffic, TraceTraffic
from .validate import check_payload


# A payload is about 8 levels deep; provider configs add a few. The limit keeps every later
# recursive step (structuring, plugins, the report) far from Python's recursion limit.
MAX_JSON_DEPTH = 64
TOO_DEEP = f"invalid JSON: nested deeper than {MAX_JSON_DEPTH} levels"

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_INNERMOST = re.compile(rb"\[\]|\{\}")


def _text_too_deep(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether valid JSON `raw` nests deeper than `limit`: strings and scalars are cut out
    (in C, by regex), then each pass removes the innermost level of the bracket skeleton."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False   # no deeper than its opening brackets (most payloads: two counts)
    skeleton = _NOT_BRACKET.sub(b"", _STRING.sub(b"", raw))
    for _ in range(limit):
        if not skeleton:
            return False
        skeleton = _INNERMOST.sub(b"", skeleton)
    return bool(skeleton)


def _value_too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """The same rule for an already parsed document (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if type(node) is dict else node
        for child in children:
            if type(child) in (dict, list, tuple):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(text: str | bytes | bytearray) -> Any:
    """Parse JSON strictly (no NaN/Infinity, at most `MAX_JSON_DEPTH` levels); errors name
    `$`. A repeated key keeps its last value."""
    try:
        value = msgspec.json.decode(text)
    except RecursionError:
        raise_problems([("$", TOO_DEEP)])
    except msgspec.DecodeError as fast_error:
        reason = str(fast_error)
    else:
        raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
        if _text_too_deep(raw):
            raise_problems([("$", TOO_DEEP)])
        return value
    # Parse again with the standard library only to name the line and column.
    try:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        reason = f"{exc.msg} (line {exc.lineno}, column {exc.colno})"
    except (ValueError, UnicodeDecodeError) as exc:
        reason = str(exc)
    except RecursionError:
        reason = f"nested deeper than {MAX_JSON_DEPTH} levels"
    raise_problems([("$", f"invalid JSON: {reason}")])


def _apply_defaults(payload: Payload) -> Payload:
    """Defaults that depend on other fields (the rank's block_size is set while structuring)."""
    traffic = payload.traffic
    if isinstance(traffic, SyntheticTraffic) and traffic.source_type == "synthetic-session" and traffic.turns_per_session is None:
        traffic = attrs.evolve(traffic, turns_per_session=4)
    elif isinstance(traffic, TraceTraffic) and traffic.trace_block_size is None and traffic.trace_format not in EMBEDDED_BLOCK_SIZE_FORMATS:
        traffic = attrs.evolve(traffic, trace_block_size=DEFAULT_TRACE_BLOCK_SIZE)
    else:
        return payload   # nothing to default (evolve would copy it and validate it again)
    return attrs.evolve(payload, traffic=traffic)


def load_payload(data: str | bytes | bytearray | dict[str, Any], *, check_support: bool = True) -> Payload:
    """Validate an execution payload: `{"spec": ReplaySpec, "traffic": ...}` or a bare
    ReplaySpec with explicit `requests`. Raises ConfigError listing every problem, one
    `<path>: <rule>` line each. With `check_support` (the default) values this release
    does not simulate are problems too (support.py)."""
    if isinstance(data, (str, bytes, bytearray)):
        data = parse_json(data)
    elif type(data) is dict and _value_too_deep(data):
        raise_problems([("$", f"nested deeper than {MAX_JSON_DEPTH} levels")])
    if type(data) is not dict:
        raise_problems([("$", f"expected an object, got {show(data)}")])

    if "spec" in data or "traffic" in data:
        root = "$.spec"
        payload, problems = structure(data, Payload, "$")
    else:
        root = "$"
        spec, problems = structure(data, ReplaySpec, "$")
        if "requests" not in data:
            problems.append(("$.requests", "is required"))
        payload = Payload(spec) if spec is not None else None
    raise_problems(problems)

    payload = _apply_defaults(payload)
    problems = check_payload(payload, root)
    if check_support:
        problems += unsupported(payload, root)
    raise_problems(problems)

    spec = payload.spec
    requests = spec.requests
    if not requests and type(requests) is tuple:
        return payload   # (a traffic payload's): nothing to order
    ordered = tuple(sorted(requests, key=lambda r: r.arrival_time_ms))
    return attrs.evolve(payload, spec=attrs.evolve(spec, requests=ordered))


def spec_to_dict(obj: ReplaySpec | Payload | Any) -> dict[str, Any]:
    """The canonical JSON shape of a loaded spec or payload (defaults filled in, aliases
    resolved, unset optional fields omitted); `load_payload` accepts it back."""
    return converter.unstructure(obj)


__all__ = ["MAX_JSON_DEPTH", "load_payload", "parse_json", "spec_to_dict"]

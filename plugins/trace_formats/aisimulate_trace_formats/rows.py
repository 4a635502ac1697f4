"""Reading JSONL trace files and decoding their rows with msgspec.

Every problem becomes one ``TraceError`` naming the file, the line and the field:
``trace.jsonl:3: output_length: expected `int`, got `str```. Files ending in ``.gz`` are
gzip (several members allowed). Blank lines are skipped but still counted.
"""

from __future__ import annotations

import gzip
import re
import zlib
from typing import Annotated

import msgspec

from aisimulate_core.errors import TraceError

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
U32 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFF_FFFF)]
I32 = Annotated[int, msgspec.Meta(ge=-0x8000_0000, le=0x7FFF_FFFF)]
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

_AT = re.compile(r"^(.*?)(?: - at `\$(.*)`)?$", re.S)
_MISSING = re.compile(r"^Object missing required field `(.+)`$")


def fail(where, field, rule):
    """Raise the TraceError for ``field`` (may be empty) of the row at ``where``."""
    raise TraceError(f"{where}: {field}: {rule}" if field else f"{where}: {rule}")


def read_lines(path):
    """The file's lines as bytes, gunzipped when the name ends in ``.gz``."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except OSError as error:
        reason = error.strerror or str(error)
        raise TraceError(f"{path}: cannot read the trace file: {reason}") from None
    except (EOFError, zlib.error) as error:
        raise TraceError(f"{path}: not a valid gzip file: {error}") from None
    return data.splitlines()


def nonblank(lines):
    """(1-based line numbers, lines) of the lines that hold something."""
    numbers, rows = [], []
    for number, line in enumerate(lines, 1):
        if line.strip():
            numbers.append(number)
            rows.append(line)
    return numbers, rows


def describe(error, prefix=""):
    """``(field, rule)`` of a msgspec error; ``prefix`` is prepended to the field path."""
    text = str(error)
    if not isinstance(error, msgspec.ValidationError):
        text = text.removeprefix("JSON is malformed: ")
        return "", f"invalid JSON: {text[0].lower()}{text[1:]}"
    message, path = _AT.match(text).groups()
    path = (path or "").lstrip(".")
    missing = _MISSING.match(message)
    if missing:
        return prefix + ".".join(filter(None, (path, missing.group(1)))), "is required"
    message = message.replace(" | null", "")
    return prefix + path, message[0].lower() + message[1:]


def decode_rows(path, row_type, numbers, rows):
    """Decode every row as ``row_type``; one msgspec call for the whole file when all are
    valid, a second, line-by-line pass to name the first bad line when not."""
    try:
        return msgspec.json.decode(b"[" + b",".join(rows) + b"]", type=list[row_type])
    except msgspec.DecodeError:
        pass
    decoder = msgspec.json.Decoder(row_type)
    for number, row in zip(numbers, rows):
        try:
            decoder.decode(row)
        except msgspec.DecodeError as error:
            fail(f"{path}:{number}", *describe(error))
    # a row that decodes alone but not inside the array (e.g. two values on one line)
    fail(path, "", "cannot be decoded as one JSON value per line")


def first_of(where, row, name, alias):
    """The value of ``name`` or of its ``alias``; giving both is an error, as in the
    reference (serde rejects a duplicate field)."""
    value = getattr(row, name)
    other = getattr(row, alias)
    if value is not None and other is not None:
        fail(where, alias, f"cannot be combined with {name}")
    return value if value is not None else other


def check_u64(where, field, ids):
    if ids and max(ids) > U64_MAX:
        fail(where, field, f"ids must fit in 64 bits, got {max(ids)}")


__all__ = ["I32", "NonNegative", "U32", "check_u64", "decode_rows", "describe", "fail",
           "first_of", "nonblank", "read_lines"]

"""Reading JSONL trace files as a stream and decoding their rows with msgspec, one per line.

Every problem becomes one ``TraceError`` naming the file, the line and the field:
``trace.jsonl:3: output_length: expected `int` <= 16777216, got 1000000000000``. Files ending
in ``.gz`` are gzip (several members allowed), inflated as they are read. Blank lines are
skipped but still counted.

Memory stays bounded whatever the file holds: it is read in chunks, a line may hold at most
``MAX_LINE_BYTES`` and a gzip file may inflate to at most ``MAX_INFLATED_BYTES``; token
lengths are bounded as in the payload (``aisimulate_core.spec.bounds.MAX_TOKENS``).
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from stat import S_ISREG
from typing import Annotated

import msgspec

from aisimulate_core.errors import TraceError
from aisimulate_core.spec.bounds import MAX_TIME_MS, MAX_TOKENS
from aisimulate_core.spec.converter import show

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
U32 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFF_FFFF)]
I32 = Annotated[int, msgspec.Meta(ge=-0x8000_0000, le=0x7FFF_FFFF)]
# input/output lengths: a request of more tokens could never be simulated in bounded memory
TokenLength = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)]
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
# whole milliseconds (Unix times): msgspec bounds must fit in an i64
WholeMs = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
# times and delays: inside the reference's Duration range (2^64 s), so sums stay finite
Milliseconds = Annotated[float, msgspec.Meta(ge=-MAX_TIME_MS, le=MAX_TIME_MS)]
Seconds = Annotated[float, msgspec.Meta(ge=-MAX_TIME_MS / 1000, le=MAX_TIME_MS / 1000)]

CHUNK_BYTES = 1 << 20
MAX_LINE_BYTES = 64 << 20          # a Mooncake row of 2^24 hash ids is about 150 MiB at
                                   # block size 1; real rows are a few KiB
MAX_INFLATED_BYTES = 4 << 30

_AT = re.compile(r"^(.*?)(?: - at `\$(.*)`)?$", re.S)
_MISSING = re.compile(r"^Object missing required field `(.+)`$")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def fail(where, field, rule):
    """Raise the TraceError for ``field`` (may be empty) of the row at ``where``."""
    raise TraceError(f"{where}: {field}: {rule}" if field else f"{where}: {rule}")


def _open(path):
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def _read_error(path, error):
    if isinstance(error, (EOFError, zlib.error, gzip.BadGzipFile)):
        return TraceError(f"{path}: not a valid gzip file: {error}")
    reason = error.strerror or str(error)
    return TraceError(f"{path}: cannot read the trace file: {reason}")


def _chunks(path):
    """The file's bytes in chunks (inflated for .gz), with every read error a TraceError."""
    inflated = path.endswith(".gz")
    total = 0
    try:
        with _open(path) as f:
            if not inflated:
                st = os.fstat(f.fileno())
                if S_ISREG(st.st_mode) and st.st_size < CHUNK_BYTES:
                    # a small file in one read sized by the file (read(CHUNK_BYTES) would
                    # allocate a whole chunk for it)
                    chunk = f.read()
                    if chunk:
                        yield chunk
                    return
            while True:
                chunk = f.read(CHUNK_BYTES)
                if not chunk:
                    return
                total += len(chunk)
                if inflated and total > MAX_INFLATED_BYTES:
                    raise TraceError(f"{path}: inflates to more than {MAX_INFLATED_BYTES} bytes "
                                     f"(4 GiB), the most a gzip trace may hold")
                yield chunk
    except (OSError, EOFError, zlib.error) as error:
        raise _read_error(path, error) from None


def file_digest(path, limit):
    """``small_file``'s digest."""
    return small_file(path, limit)[0]


def small_file(path, limit):
    """``(digest, bytes)`` of the file: what identifies its bytes (its size, modification time
    and CRC-32) and the bytes themselves, read once; ``(None, None)`` when it is larger than
    ``limit`` bytes or cannot be read (the loader then reports why, or reads it unkept). CRC-32, not a cryptographic hash: zlib is loaded anyway,
    hashlib would add OpenSSL (about 4 MB) to every run, and an edit that keeps the size, the
    time and the CRC of a file is not a mistake anyone makes.

    Only a regular file that is not gzip has one: a pipe (``<(zcat trace.gz)``) can be read
    once only, and a gzip file's size says nothing of what its rows take in memory."""
    if path.endswith(".gz"):   # (read as gzip by its name, as _open does)
        return None, None
    try:
        # (os.open, not open(): no buffered reader and its isatty probe for one read)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None, None
    try:
        st = os.fstat(fd)
        if not S_ISREG(st.st_mode) or st.st_size > limit:
            return None, None
        # sized by the file (read(limit) would allocate the limit), then on to the end, as
        # f.read() reads: a file that grew meanwhile is read whole, or left when too large
        parts = [os.read(fd, st.st_size + 1)]
        total = len(parts[0])
        while total > st.st_size and parts[-1]:
            if total > limit:
                return None, None
            parts.append(os.read(fd, 1 << 16))
            total += len(parts[-1])
    except OSError:
        return None, None
    finally:
        os.close(fd)
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    if len(data) > limit:
        return None, None
    return (len(data), st.st_mtime_ns, zlib.crc32(data)), data


def _too_long(path, number):
    return TraceError(f"{path}:{number}: line is longer than {MAX_LINE_BYTES} bytes (64 MiB), "
                      f"the most one trace row may hold")


def iter_lines(path):
    """``(line number, line)`` of every non-blank line, read in chunks: a file of one endless
    line (``/dev/zero``) fails after ``MAX_LINE_BYTES``, a gzip bomb of blank lines streams
    through without being held."""
    number = 0                       # lines finished so far
    partial, partial_size = [], 0    # the line being read, across chunks
    for chunk in _chunks(path):
        if not partial_size and not chunk.strip():
            number += chunk.count(b"\n")  # a run of blank lines: nothing to split
            continue
        lines = chunk.split(b"\n")
        if len(lines) == 1:
            partial.append(chunk)
            partial_size += len(chunk)
            if partial_size > MAX_LINE_BYTES:
                raise _too_long(path, number + 1)
            continue
        if partial:
            partial.append(lines[0])
            lines[0] = b"".join(partial)
        tail = lines.pop()
        partial, partial_size = [tail], len(tail)
        for line in lines:
            number += 1
            if len(line) > MAX_LINE_BYTES:
                raise _too_long(path, number)
            if line.strip():
                yield number, line
        if partial_size > MAX_LINE_BYTES:
            raise _too_long(path, number + 1)
    line = b"".join(partial)
    if line.strip():
        yield number + 1, line


def _value_at(line, path):
    """The JSON value at ``path`` ("a.b[0]") in ``line``, or a marker when it cannot be found."""
    try:
        value = msgspec.json.decode(line)
        for name, index in _STEP.findall("." + path if path else ""):
            value = value[int(index)] if index else value[name]
        return value
    except (msgspec.DecodeError, RecursionError, LookupError, TypeError, ValueError):
        return _NOT_FOUND


_NOT_FOUND = object()


def describe(error, prefix="", line=None):
    """``(field, rule)`` of a msgspec error; ``prefix`` is prepended to the field path. With
    ``line`` a rule that does not say what it got is followed by ``, got VALUE``."""
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
    rule = message[0].lower() + message[1:]
    if line is not None and rule.startswith("expected `") and ", got " not in rule:
        value = _value_at(line, prefix + path)
        if value is not _NOT_FOUND:
            rule += f", got {show(value)}"
    return prefix + path, rule


def decode_line(decoder, where, line, prefix=""):
    """One row decoded by ``decoder`` (a ``msgspec.json.Decoder``), or the TraceError."""
    try:
        return decoder.decode(line)
    except msgspec.DecodeError as error:
        fail(where, *describe(error, prefix, line))
    except RecursionError:
        fail(where, "", "invalid JSON: nested too deeply")


_DECODERS = {}


def row_decoder(row_type):
    """The ``msgspec.json.Decoder`` of ``row_type``, built once per process: building one
    inspects the type's annotations (about a quarter of a millisecond), which a run should not
    pay again. ``mooncake``, the format most runs read, builds its own as the plugin loads;
    the others on their first load."""
    decoder = _DECODERS.get(row_type)
    if decoder is None:
        decoder = _DECODERS[row_type] = msgspec.json.Decoder(row_type)
    return decoder


# in a file's bytes with a newline after every line: a blank line (nothing but JSON
# whitespace) other than the first, and a blank first line (each pattern starts with a
# literal or is anchored: one fast scan, not a match tried at every byte)
_BLANK_LINE = re.compile(rb"\n[ \t\r]*\n")
_BLANK_FIRST = re.compile(rb"[ \t\r]*\n")


def decode_all(data, row_type):
    """Every row of a whole file's bytes ``data`` decoded as ``row_type`` in one call (row k
    is line k), or None when that does not hold or a row does not decode: a blank line, a
    line of two values, an error (``decode_rows`` then numbers the rows and words the error)."""
    text = data if data.endswith(b"\n") else data + b"\n"
    if _BLANK_FIRST.match(text) or _BLANK_LINE.search(text):
        return None
    try:
        rows = row_decoder(row_type).decode_lines(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    # no line is blank, so each holds a value at least: as many values as lines is one each
    return rows if len(rows) == text.count(b"\n") else None


def decode_rows(path, row_type, lines=None):
    """``(line number, row)`` of every non-blank line decoded as ``row_type``, streamed;
    ``lines`` (from ``iter_lines``, perhaps partly read) stands for the whole file."""
    decoder = row_decoder(row_type)
    for number, line in iter_lines(path) if lines is None else lines:
        yield number, decode_line(decoder, f"{path}:{number}", line)


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


def check_prompt_tokens(where, field, tokens, what):
    """A prompt that grows past the token bound (a session's history, an agent's context)."""
    if tokens > MAX_TOKENS:
        fail(where, field, f"makes {what} {tokens} tokens, more than {MAX_TOKENS}")


def model_block_size(block_size):
    """The block size the trace model is given: ids stand for ``block_size`` tokens, but no
    prompt is longer than ``MAX_TOKENS``, so a larger block is the same prompt as a block of
    ``MAX_TOKENS`` (which keeps token runs inside 32 bits: the reference accepts any u64)."""
    return min(block_size, MAX_TOKENS)


__all__ = ["I32", "MAX_INFLATED_BYTES", "MAX_LINE_BYTES", "Milliseconds", "NonNegative", "Seconds",
           "TokenLength", "U32", "WholeMs",
           "check_prompt_tokens", "check_u64", "decode_line", "decode_rows", "describe", "fail",
           "decode_all", "file_digest",
           "first_of", "small_file", "iter_lines", "model_block_size", "row_decoder"]

"""Reading a ``weka`` corpus: which files, their source names, their digest, their trace objects.

A corpus is one ``.json`` file (one trace object), one ``.jsonl`` file (one trace object per
line) or a directory searched recursively for both, in the order of their paths below it;
symlinks are refused anywhere, so the corpus is exactly the bytes named. Each trace object is
a *play*, decoded with msgspec into the structs below (CLUSTER.md 5.1): a problem is one
``TraceError`` naming the file, the object's line and the field
(``corpus.jsonl:2: requests[1].status: must be 'completed' or 'async_launched', got 'x'``).

A play's *source name* keeps ids and KV identities apart (CLUSTER.md 5.2): the file's path
below the input root (its bare name for a single file), with ``#<index:06>`` appended for the
objects of a ``.jsonl``. The source digest is BLAKE3 over every file's name, size and bytes,
then over that and the resolved timestamp basis, as the reference computes it.
"""

from __future__ import annotations

import os
import stat
import struct
from typing import Annotated

import blake3
import msgspec

from aisimulate_core.errors import TraceError

from .rows import (MAX_LINE_BYTES, NonNegative, Seconds, _chunks, decode_line, fail, iter_lines)

# the reference's per-request ceiling (a larger declared length is a malformed row)
MAX_DECLARED_TOKENS = 10_000_000
DeclaredTokens = Annotated[int, msgspec.Meta(ge=0, le=MAX_DECLARED_TOKENS)]
I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]

_CORPUS_DOMAIN = b"aisimulate-weka-corpus-v1\0"
_SEMANTIC_DOMAIN = b"aisimulate-weka-corpus-semantics-v2\0"


class Request(msgspec.Struct, kw_only=True, tag_field="type"):
    t: Seconds                             # bounded so that every sum of times stays finite
    model: str
    input_length: DeclaredTokens = msgspec.field(name="in")
    output_length: DeclaredTokens = msgspec.field(name="out")
    hash_ids: list[NonNegative] = []
    api_time: Seconds | None = None        # absent counts as 0 for dependencies
    # recorded but not replayed; typed so that a malformed value is refused as in the reference
    input_types: list[str] = []
    output_types: list[str] = []
    stop: str = ""
    think_time: float | None = None
    ttft: float | None = None


class Normal(Request, tag="n"):
    pass


class Streaming(Request, tag="s"):
    pass


class Subagent(msgspec.Struct, kw_only=True, tag_field="type", tag="subagent"):
    t: Seconds                             # the marker
    agent_id: str
    subagent_type: str
    status: str                            # completed (blocking) | async_launched (background)
    requests: list[Normal | Streaming]
    duration_ms: I64 | None = None
    total_tokens: NonNegative | None = None
    tool_use_count: NonNegative | None = None
    tool_tokens: NonNegative = 0
    system_tokens: NonNegative = 0
    models: list[str] = []


class Play(msgspec.Struct, kw_only=True):
    id: str
    block_size: NonNegative
    hash_id_scope: str
    requests: list[Normal | Streaming | Subagent]
    models: list[str] = []
    tool_tokens: NonNegative = 0
    system_tokens: NonNegative = 0


class SourceFile:
    __slots__ = ("path", "name", "jsonl")

    def __init__(self, path, name):
        self.path = path                   # as opened (the input joined with the name below it)
        self.name = name                   # relative to the input root, '/'-separated
        self.jsonl = name.lower().endswith(".jsonl")


def _is_weka_file(name):
    return name.lower().endswith((".json", ".jsonl"))


def _lstat(path):
    try:
        return os.lstat(path)
    except OSError as error:
        raise TraceError(f"{path}: cannot read the trace file: "
                         f"{error.strerror or error}") from None


def source_files(path):
    """The corpus's files in source-name order; a symlink anywhere is an error."""
    info = _lstat(path)
    if stat.S_ISLNK(info.st_mode):
        fail(path, "", "a weka source may not be a symlink")
    if stat.S_ISREG(info.st_mode):
        if not _is_weka_file(path):
            fail(path, "", "a weka source file must end in .json or .jsonl")
        return [SourceFile(path, _utf8(path, os.path.basename(path)))]
    if not stat.S_ISDIR(info.st_mode):
        fail(path, "", "a weka source must be a file or a directory")
    files = []
    _walk(path, "", files)
    if not files:
        fail(path, "", "holds no .json or .jsonl files")
    files.sort(key=lambda f: f.name)
    return files


def _walk(directory, prefix, files):
    try:
        names = sorted(os.listdir(directory))
    except OSError as error:
        raise TraceError(f"{directory}: cannot read the weka directory: "
                         f"{error.strerror or error}") from None
    for name in names:
        path = os.path.join(directory, name)
        info = _lstat(path)
        if stat.S_ISLNK(info.st_mode):
            fail(path, "", "a weka corpus may not contain symlinks")
        if stat.S_ISDIR(info.st_mode):
            _walk(path, prefix + name + "/", files)
        elif stat.S_ISREG(info.st_mode) and _is_weka_file(name):
            files.append(SourceFile(path, _utf8(path, prefix + name)))


def _utf8(path, name):
    """A source name is hashed as UTF-8 (ids, digest): a name that is not cannot be one."""
    try:
        name.encode()
    except UnicodeEncodeError:
        fail(path.encode(errors="replace").decode(), "", "a weka path must be valid UTF-8")
    return name


def _u64(n):
    return struct.pack("<Q", n)


def corpus_digest(files, basis):
    """The reference's source digest: the raw corpus (names, sizes, bytes), then the basis."""
    raw = blake3.blake3(_CORPUS_DOMAIN)
    for source in files:
        name = source.name.encode()
        raw.update(_u64(len(name)) + name + _u64(os.stat(source.path).st_size))
        for chunk in _chunks(source.path):
            raw.update(chunk)
    raw_hex = raw.hexdigest().encode()
    semantic = blake3.blake3(_SEMANTIC_DOMAIN)
    semantic.update(_u64(len(raw_hex)) + raw_hex + _u64(len(basis)) + basis.encode())
    return semantic.hexdigest()


_DECODER = msgspec.json.Decoder(Play)


def _json_object(source):
    """``(line, bytes)`` of a ``.json`` file: one object, however many lines it spans."""
    data, size = [], 0
    for chunk in _chunks(source.path):
        size += len(chunk)
        if size > MAX_LINE_BYTES:
            fail(source.path, "", f"is longer than {MAX_LINE_BYTES} bytes (64 MiB), the most "
                 "one weka trace object may hold")
        data.append(chunk)
    text = b"".join(data)
    stripped = text.lstrip()
    if not stripped:
        fail(source.path, "", "holds no trace object")
    return text[:len(text) - len(stripped)].count(b"\n") + 1, text


def plays(source):
    """``(where, source name, play)`` of every trace object of one file, streamed."""
    if not source.jsonl:
        number, text = _json_object(source)
        where = f"{source.path}:{number}"
        try:
            play = decode_line(_DECODER, where, text)
        except TraceError as error:
            if "trailing characters" not in str(error):
                raise
            fail(where, "", "holds more than one JSON object; name the file .jsonl for one "
                 "trace per line")
        yield where, source.name, play
        return
    index = -1
    for index, (number, line) in enumerate(iter_lines(source.path)):
        where = f"{source.path}:{number}"
        yield where, f"{source.name}#{index:06}", decode_line(_DECODER, where, line)
    if index < 0:
        fail(source.path, "", "holds no trace objects")


__all__ = ["MAX_DECLARED_TOKENS", "Normal", "Play", "Request", "SourceFile", "Streaming",
           "Subagent", "corpus_digest", "plays", "source_files"]

"""Per-request records as JSON lines, CSV or Parquet, chosen by the file's extension, written as
they come and read back to the same dicts.

* ``.csv``: a header of every per-request key (``report.PER_REQUEST_KEYS``), then one row per
  record, written as it is handed over. A cell is empty for None; a number, ``true``/``false``,
  a list or an object is its JSON text; a string is its own text, unless that text would read
  back as something else (it is empty, or valid JSON such as ``42`` or ``"x"``): then it is
  written as a JSON string. ``read_records`` undoes exactly this, so a CSV reads back to the
  records the JSON lines hold.
* ``.parquet`` (pyarrow, optional): the same columns, typed: the ``*_ms`` times float64, the
  token counts and worker indices int64, ``uuid`` and ``terminal_status`` strings, every other
  column (ids that may be numbers or text, histories, agentic objects) a string in the CSV
  cell encoding. Rows go out in row groups of ``ROW_GROUP_ROWS``: memory holds one group.
* anything else (``.jsonl``, ``-``, ``/dev/null``): one JSON object per line.

Reading back, a key a record leaves out when unset (``request_id``, ``agentic``, ...) is left
out again when its cell is empty.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import msgspec

from aisimulate_core.cli.outputs import CliError, OutputFile
from aisimulate_core.messages import escape_controls
from aisimulate_core.report import OPTIONAL_KEYS, PER_REQUEST_KEYS

JSONL, CSV, PARQUET = "jsonl", "csv", "parquet"
ROW_GROUP_ROWS = 8192
PARQUET_EXTRA = "aisimulate-core[parquet]"
TEXT_COLUMNS = frozenset({"uuid", "terminal_status"})
INT_COLUMNS = frozenset({
    "turn_index", "input_length", "requested_output_length", "output_length",
    "reused_input_tokens", "first_admission_g1_reused_input_tokens",
    "first_admission_host_reused_input_tokens", "prefill_worker_idx", "decode_worker_idx",
    "decode_reused_input_tokens", "prefill_route_overlap_tokens", "decode_route_overlap_tokens",
    "admission_count", "readmission_count",
})


def record_format(given: str) -> str:
    """The format a records file name asks for, by its extension (JSON lines by default)."""
    suffix = Path(given).suffix.lower() if given != "-" else ""
    return {".csv": CSV, ".parquet": PARQUET}.get(suffix, JSONL)


def require_format(option: str, given: str) -> str:
    """``record_format(given)``, with a one-line error before any run if Parquet is asked for
    and pyarrow is missing."""
    fmt = record_format(given)
    if fmt == PARQUET:
        _pyarrow(option)
    return fmt


def _pyarrow(option: str):
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401  (the submodule the writer and reader use)
    except ImportError:
        raise CliError(f"{option}: Parquet needs pyarrow, which is not installed: "
                       f"pip install '{PARQUET_EXTRA}' (or pip install pyarrow)") from None
    return pyarrow


def _column_of(key: str) -> str:
    if key in TEXT_COLUMNS:
        return "text"
    if key in INT_COLUMNS:
        return "int"
    return "float" if key.endswith("_ms") else "encoded"


def encode_cell(value: Any) -> str | None:
    """A value in the CSV cell encoding (None stays None: an empty cell). Numbers are written
    as the JSON lines writer writes them: a NaN or infinity is null there, so empty here."""
    kind = type(value)
    if kind is str:
        return value if value and not _reads_as_json(value) else _encode_json(value).decode()
    if value is None:
        return None
    if kind is int:
        return str(value)
    if kind is float:
        return repr(value) if math.isfinite(value) else None
    if kind is bool:
        return "true" if value else "false"
    return _encode_json(value).decode()


def decode_cell(cell: str | None) -> Any:
    if not cell:
        return None
    first = cell[0]
    if first not in _JSON_STARTS:  # no JSON text starts otherwise: a plain string
        return cell
    if first in _NUMBER_STARTS and _JSON_NUMBER.match(cell) is None:  # a uuid, say
        return cell
    try:
        return json.loads(cell)
    except ValueError:
        return cell


_encode_json = msgspec.json.Encoder().encode
_JSON_STARTS = frozenset('"[{-0123456789tfnNI \t\r\n')
_NUMBER_STARTS = frozenset("0123456789")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_JSON_WORDS = frozenset({"true", "false", "null", "NaN", "Infinity", "-Infinity"})


def _reads_as_json(text: str) -> bool:
    """Whether ``json.loads`` could read ``text`` as a value (conservatively: text with
    surrounding whitespace, or starting like a string, array or object, counts)."""
    first = text[0]
    if first in '"[{' or first.isspace() or text[-1].isspace():
        return True
    return text in _JSON_WORDS or _JSON_NUMBER.match(text) is not None


def _unknown_keys(record: dict, option: str) -> CliError:
    extra = ", ".join(escape_controls(str(k)) for k in record if k not in _KEY_SET)
    return CliError(f"{option}: per-request record keys without a column: {extra}")


_KEY_SET = frozenset(PER_REQUEST_KEYS)


class CsvRecordWriter:
    """Records as CSV rows, each written to the output as it is handed over."""

    def __init__(self, out: OutputFile) -> None:
        self._out = out
        self._rows = csv.writer(out, lineterminator="\n")
        self._rows.writerow(PER_REQUEST_KEYS)
        self.count = 0

    def __call__(self, record: dict[str, Any]) -> None:
        if len(record.keys() - _KEY_SET):
            raise _unknown_keys(record, self._out.target.option)
        row = []
        for key in PER_REQUEST_KEYS:
            cell = encode_cell(record.get(key))
            row.append("" if cell is None else cell)
        self._rows.writerow(row)
        self.count += 1

    def close(self) -> None:
        pass


class _ByteSink:
    """The file object pyarrow writes to: the output's binary side, its errors as CliError."""

    closed = False

    def __init__(self, out: OutputFile) -> None:
        self._out = out

    def write(self, data) -> int:
        self._out.write_bytes(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass


class ParquetRecordWriter:
    """Records as Parquet row groups of ``row_group_rows`` rows; ``close()`` writes the last
    group and the footer."""

    def __init__(self, out: OutputFile, row_group_rows: int = ROW_GROUP_ROWS) -> None:
        pa = _pyarrow(out.target.option)
        import pyarrow.parquet as pq

        self._pa = pa
        self._out = out
        types = {"text": pa.string(), "int": pa.int64(), "float": pa.float64(),
                 "encoded": pa.string()}
        self._kinds = [(key, _column_of(key)) for key in PER_REQUEST_KEYS]
        self._schema = pa.schema([(key, types[kind]) for key, kind in self._kinds])
        self._writer = pq.ParquetWriter(_ByteSink(out), self._schema)
        self._rows = row_group_rows
        self._columns: list[list] = [[] for _ in self._kinds]
        self.count = 0

    def __call__(self, record: dict[str, Any]) -> None:
        if len(record.keys() - _KEY_SET):
            raise _unknown_keys(record, self._out.target.option)
        for column, (key, kind) in zip(self._columns, self._kinds):
            value = record.get(key)
            if kind == "encoded":
                value = encode_cell(value)
            elif value is not None and not _fits(value, kind):
                raise CliError(f"{self._out.target.option}: record {self.count + 1}: {key}: "
                               f"must be {'an integer' if kind == 'int' else kind}, got "
                               f"{escape_controls(repr(value))}")
            column.append(value)
        self.count += 1
        if len(self._columns[0]) >= self._rows:
            self._flush()

    def _flush(self) -> None:
        if not self._columns[0]:
            return
        arrays = [self._pa.array(column, type=field.type)
                  for column, field in zip(self._columns, self._schema)]
        self._writer.write_table(self._pa.Table.from_arrays(arrays, schema=self._schema))
        self._columns = [[] for _ in self._kinds]

    def close(self) -> None:
        self._flush()
        self._writer.close()


def _fits(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int) and -2**63 <= value < 2**63
    if kind == "float":
        return isinstance(value, (int, float))
    return isinstance(value, str)


def record_writer(out: OutputFile, fmt: str) -> Callable[[dict], None] | None:
    """The writer of ``fmt`` on ``out`` (None for JSON lines: the caller's own writer)."""
    if fmt == CSV:
        return CsvRecordWriter(out)
    if fmt == PARQUET:
        return ParquetRecordWriter(out)
    return None


def _restored(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items()
            if value is not None or key not in OPTIONAL_KEYS}


def read_records(path: str | Path, option: str = "--per-request",
                 keys: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
    """The records of a JSON lines, CSV or Parquet file (by extension), one dict at a time, as
    the run wrote them (only ``keys`` of each, when given: a Parquet file then reads only
    those columns). Errors are one line naming the file (and line)."""
    path = Path(path)
    fmt = record_format(str(path))
    if fmt == PARQUET:
        records = _reading(path, lambda shown: _read_parquet(path, option, shown, keys))
    else:
        records = _reading(path, lambda shown: _read_text(
            path, _read_csv if fmt == CSV else _read_jsonl, shown))
    if keys is None:
        return records
    return ({key: record[key] for key in keys if key in record} for record in records)


def read_json_lines(path: str | Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON lines file (telemetry samples), one at a time."""
    path = Path(path)
    return _reading(path, lambda shown: _read_text(path, _read_jsonl, shown))


def _read_text(path: Path, read, shown: str) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8", newline="") as handle:
        yield from read(handle, shown)


def _reading(path: Path, read) -> Iterator[dict[str, Any]]:
    """``read(shown)``'s items, its file errors as one-line CliErrors naming ``path``."""
    shown = escape_controls(str(path))
    with file_errors(shown):
        yield from read(shown)


@contextlib.contextmanager
def file_errors(shown: str, what: str = "") -> Iterator[None]:
    """A file's read errors inside the block as one-line CliErrors: ``cannot read {what}
    {shown}: no such file`` and the like."""
    name = f"{what} {shown}" if what else shown
    try:
        yield
    except FileNotFoundError:
        raise CliError(f"cannot read {name}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"cannot read {name}: is a directory") from None
    except UnicodeDecodeError as error:
        raise CliError(f"{shown}: not UTF-8 text ({error.reason})") from None
    except OSError as error:
        raise CliError(f"cannot read {name}: {error.strerror or error}") from None


def _read_jsonl(handle, shown: str) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(handle, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            raise CliError(f"{shown}:{number}: not valid JSON: {error}") from None
        if not isinstance(record, dict):
            raise CliError(f"{shown}:{number}: a record is a JSON object, got "
                           f"{type(record).__name__}")
        yield record


def _read_csv(handle, shown: str) -> Iterator[dict[str, Any]]:
    rows = csv.reader(handle)
    header = next(rows, None)
    if header is None:
        return
    for number, row in enumerate(rows, 2):
        if len(row) != len(header):
            raise CliError(f"{shown}:{number}: {len(row)} cells, the header has {len(header)}")
        yield _restored({key: decode_cell(cell) for key, cell in zip(header, row)})


def _read_parquet(path: Path, option: str, shown: str,
                  keys: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
    pa = _pyarrow(option)
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        names = parquet.schema_arrow.names
        columns = None if keys is None else [name for name in names if name in keys]
        encoded = [name for name in (names if columns is None else columns)
                   if _column_of(name) == "encoded"]
        for batch in parquet.iter_batches(columns=columns):
            for row in batch.to_pylist():
                for name in encoded:
                    if isinstance(row[name], str):
                        row[name] = decode_cell(row[name])
                yield _restored(row)
    except (pa.ArrowException, ValueError) as error:
        raise CliError(f"{shown}: not a readable Parquet file: {error}") from None


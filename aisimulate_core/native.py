"""Chooses between the compiled C core and its pure-Python twins.

``AISIMULATE_BACKEND`` selects the implementation of the event queue, the KV
block pool, block hashing and the Rust-compatible RNG:

* ``c``: the cffi module ``aisimulate_core._native``; an error if it is not built;
* ``python``: the pure-Python twins (same results, slower);
* unset or ``auto``: C when the compiled module imports, else Python.

``BACKEND`` is the resolved choice for the process. Every factory also takes
``backend="c" | "python"`` so that one process can run both side by side
(the parity tests do).

Status codes are the C core's; ``status_error`` turns one into the exception
both backends raise, so the twins fail with identical types and messages.
"""

import os
from array import array

from aisimulate_core.errors import NativeArgumentError, NativeEmptyError, NativeError, NativeMemoryError

OK = 0
NOSPACE = 1
ENOMEM = -1
EEMPTY = -2
EINVAL = -3
EBADSEQ = -4
ENOTRESIDENT = -5
EHASHMISMATCH = -6
ECORRUPT = -7

STATUS_NAMES = {
    OK: "AISIM_OK",
    NOSPACE: "AISIM_NOSPACE",
    ENOMEM: "AISIM_ENOMEM",
    EEMPTY: "AISIM_EEMPTY",
    EINVAL: "AISIM_EINVAL",
    EBADSEQ: "AISIM_EBADSEQ",
    ENOTRESIDENT: "AISIM_ENOTRESIDENT",
    EHASHMISMATCH: "AISIM_EHASHMISMATCH",
    ECORRUPT: "AISIM_ECORRUPT",
}

_STATUS_MEANINGS = {
    EBADSEQ: "unknown or released sequence handle",
    ENOTRESIDENT: "a block hash has no resident copy",
    EHASHMISMATCH: "a block is already committed under another hash",
    ECORRUPT: "consistency check failed",
}

try:
    from aisimulate_core._native import ffi, lib
except ImportError as exc:  # not built: the Python twins still work
    ffi = lib = None
    _IMPORT_ERROR = exc
else:
    _IMPORT_ERROR = None

# cffi builds a type the first time a string names it, completes a struct at its first use and
# makes a function's wrapper at its first ``lib.name``: about 0.4 ms of a small run's first
# call in a process, paid at every first use. They are built here, once, at import (about
# 0.8 ms), as a compiled core is ready when it loads. The strings are the spellings the code
# uses ("T *", "T **", "T[]"); one spelled otherwise is only built at its first use.
_SCALARS = ("double", "int64_t", "uint64_t", "uint32_t", "int32_t", "size_t", "uint8_t", "int")


def _build_types():
    ffi.typeof("void *")
    ffi.typeof("void *[]")
    typedefs, _, _ = ffi.list_types()
    for name in typedefs:
        ffi.typeof(name + " *")
        ffi.typeof(name + " **")
        try:
            ffi.sizeof(name)      # completes the struct (an opaque one has no size)
        except ffi.error:
            continue
        ffi.typeof(name + "[]")
    for name in _SCALARS:
        for suffix in (" *", " **", "[]", " *[]"):
            ffi.typeof(name + suffix)
    for name in dir(lib):
        getattr(lib, name)


if lib is not None:
    _build_types()

BACKEND_ENV = "AISIMULATE_BACKEND"


def _choose(choice, origin):
    choice = (choice or "").strip().lower() or "auto"
    if choice == "auto":
        return "c" if lib is not None else "python"
    if choice == "python":
        return "python"
    if choice == "c":
        if lib is None:
            raise NativeError(
                f"{origin} asks for the C backend but aisimulate_core._native does not import "
                f"({_IMPORT_ERROR}); build it with `pip install -e .` or use the Python backend"
            )
        return "c"
    raise NativeError(f"{origin} must be 'c', 'python' or 'auto', got {choice!r}")


BACKEND = _choose(os.environ.get(BACKEND_ENV), BACKEND_ENV)


def resolve_backend(backend=None):
    """The backend a factory should build: ``backend`` if given, else ``BACKEND``."""
    if backend is None:
        return BACKEND
    return _choose(backend, "backend")


def status_error(status, operation, detail=None):
    """The exception for a failed C status (the Python twins raise the same): always a
    ``NativeError``, also an ``IndexError``/``MemoryError``/``ValueError`` where the status
    is one of those."""
    if status == EEMPTY:
        return NativeEmptyError(f"{operation}: {detail or 'empty'}")
    if status == ENOMEM:
        return NativeMemoryError(f"{operation}: out of memory{f' ({detail})' if detail else ''}")
    if status == EINVAL:
        return NativeArgumentError(f"{operation}: {detail or 'invalid argument'}")
    name = STATUS_NAMES.get(status, f"status {status}")
    meaning = detail or _STATUS_MEANINGS.get(status, "unexpected status")
    return NativeError(f"{operation} failed: {meaning} ({name})")


def check_status(status, operation):
    """``status`` when it is not an error (a count, a slot, OK); else its ``status_error``."""
    if status < 0:
        raise status_error(status, operation)
    return status


def c_array(typecode, pointer, n):
    """An ``array(typecode)`` copy of ``n`` items at the C ``pointer`` (8-byte items)."""
    out = array(typecode)
    if n:
        out.frombytes(ffi.buffer(pointer, 8 * n))
    return out


def fold_break_triples(breaks, pointer, start, n):
    """Add C's ``(before, after, count)`` break-gap triples ``start..n`` at ``pointer`` to the
    dict ``breaks`` in the order C counted them; returns ``n``, the triples read (the C vLLM
    MTP rank and the C SGLang rank count their break gaps so)."""
    if n > start:
        triples = ffi.unpack(pointer + 3 * start, 3 * (n - start))
        for i in range(0, len(triples), 3):
            key = (triples[i], triples[i + 1])
            breaks[key] = breaks.get(key, 0) + triples[i + 2]
    return n


def open_handle(type_name, create, free, operation, *args, detail=None):
    """A new C object of ``type_name``: ``create(out, *args)`` makes it, and the handle frees
    itself with ``free`` when Python drops it; a failed status raises ``status_error``."""
    box = ffi.new(f"{type_name} **")
    status = create(box, *args)
    if status:
        raise status_error(status, operation, detail)
    return ffi.gc(box[0], free)


def handle_view(handle, view_type, view_of):
    """The read-only view struct a C object keeps current (counters read as field loads)."""
    box = ffi.new(f"{view_type} **")
    view_of(handle, box)
    return box[0]

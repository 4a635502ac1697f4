"""Worker seconds summed in time order over a disaggregated run's clock advances.

The reference adds ``workers × dt / 1000`` for each pool at every advance of its clock, every
pass end inside an extended pass included, left to right in time order; a float sum depends on
that order, so ours must follow it. ``time_sums(runs, workers)`` takes the visited times and
each rank's pass ends (``runs``, each already in time order) and the pools' worker counts, and
returns one sum per pool. The C backend (csrc/time_sums.c) merges the runs without building the
merged list; the Python twin sorts their concatenation; both make the same additions in the
same order. ``backend="python"`` or ``"c"`` forces one; a run out of order (which the loop never
makes) takes the Python path on either.
"""

from __future__ import annotations

import functools
import itertools
import operator
from array import array

from .. import native


def time_sums(runs, workers, backend=None):
    """One sum per entry of ``workers``: ``workers[p] × dt / 1000`` over every advance ``dt``
    of the merged time order of ``runs`` (the first from 0.0)."""
    if native.resolve_backend(backend) == "c":
        out = _sums_c(runs, workers)
        if out is not None:
            return out
    return _sums_py(runs, workers)


def _sums_py(runs, workers):
    # every visited time and pass end in time order, a time seen twice kept twice: its second
    # advance is +0.0, which leaves a sum as it is
    times = sorted(itertools.chain(*runs))
    # every advance dt, summed left to right with C-level loops (reduce, not sum: its float
    # summation differs by Python version)
    advances = list(map(operator.sub, times, itertools.chain((0.0,), times)))
    return [functools.reduce(operator.add, map(operator.truediv, map(
        operator.mul, itertools.repeat(w), advances), itertools.repeat(1000.0)), 0.0)
        for w in workers]


def _sums_c(runs, workers):
    """The C merge's sums, or None when a run is out of time order."""
    ffi = native.ffi
    keep = [r if isinstance(r, array) and r.typecode == "d" else array("d", r) for r in runs]
    pointers = ffi.new("double *[]", [ffi.from_buffer("double[]", r) if len(r) else ffi.NULL
                                      for r in keep] or [ffi.NULL])
    lens = ffi.new("size_t[]", [len(r) for r in keep] or [0])
    counts = ffi.new("double[]", [float(w) for w in workers] or [0.0])
    out = ffi.new("double[]", max(1, len(workers)))
    status = native.lib.aisim_time_sums(pointers, lens, len(keep), counts, len(workers), out)
    if status == native.EINVAL:
        return None
    native.check_status(status, "aisim_time_sums")
    return [out[p] for p in range(len(workers))]

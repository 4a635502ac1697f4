"""What every plot shares: matplotlib loaded on demand (the ``plot`` extra), a figure drawn on
the Agg canvas without touching pyplot's global state, a PNG written whole or not at all, and
the ``Plot`` each plot function returns: the path and the data series it drew."""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import attrs

from aisimulate_core.errors import AisimError
from aisimulate_core.messages import escape_controls

PLOT_EXTRA = "aisimulate-core[plot]"


class MissingExtraError(AisimError):
    """An optional dependency is not installed; the message names the extra to install."""


class PlotError(AisimError):
    """A plot cannot be made from what it was given (no data, an unwritable path)."""


@attrs.frozen
class Plot:
    """One PNG written by a plot function.

    ``series`` holds the data the picture shows, in plain lists (times in ms, latencies in ms,
    fractions in [0, 1]) so that a caller or a test can read what was drawn without looking at
    pixels; each plot function's docstring lists its keys."""

    path: str
    series: dict[str, Any]


def missing_extra(what: str, module: str, extra: str) -> MissingExtraError:
    return MissingExtraError(f"{what} needs {module}, which is not installed: "
                             f"pip install '{extra}'")


def new_figure(rows: int = 1, cols: int = 1, *, width: float = 8.0, height: float = 5.0,
               sharex: bool = False):
    """A matplotlib Figure on an Agg canvas and its axes (a flat list), or MissingExtraError."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise missing_extra("plotting", "matplotlib", PLOT_EXTRA) from None
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, cols, sharex=sharex, squeeze=False)
    return figure, [ax for row in axes for ax in row]


def save_png(figure, path: str | os.PathLike) -> str:
    """Write ``figure`` as a PNG at ``path`` through a temporary file beside it (an existing
    file is replaced only by a complete picture); returns the path as text."""
    target = Path(path)
    shown = escape_controls(str(path))
    if target.is_dir():
        raise PlotError(f"cannot write {shown}: is a directory")
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise PlotError(f"cannot write {shown}: directory {escape_controls(str(directory))} "
                        "does not exist")
    temp = None
    try:
        with tempfile.NamedTemporaryFile("wb", dir=directory, prefix=f".{target.name}.",
                                         suffix=".tmp", delete=False) as handle:
            temp = handle.name
            figure.savefig(handle, format="png")
        os.chmod(temp, _new_file_mode())
        os.replace(temp, target)
        temp = None
    except OSError as error:
        raise PlotError(f"cannot write {shown}: {error.strerror or error}") from None
    finally:
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)
    return str(target)


def _new_file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def number(value: Any) -> float | None:
    """``value`` as a finite float, or None (missing, not a number, a bool, NaN or infinite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None

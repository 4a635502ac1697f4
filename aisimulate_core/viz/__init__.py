"""Pictures of runs, comparisons and sweeps as PNG files (matplotlib, the ``plot`` extra).

No module here imports matplotlib at import time; a plot function without it raises
``MissingExtraError`` naming the extra. Every plot function returns a ``Plot``: the file it
wrote and the data series it drew.
"""

from aisimulate_core.viz.figure import MissingExtraError, Plot, PlotError
from aisimulate_core.viz.compare import plot_cdf_overlay
from aisimulate_core.viz.runs import plot_latency_cdfs, plot_request_timeline, plot_telemetry
from aisimulate_core.viz.sweep import plot_goal_vs_axis, plot_pareto

__all__ = ["MissingExtraError", "Plot", "PlotError", "plot_cdf_overlay", "plot_goal_vs_axis",
           "plot_latency_cdfs", "plot_pareto", "plot_request_timeline", "plot_telemetry"]

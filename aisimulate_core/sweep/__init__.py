"""``aisimulate sweep``: a base payload, axes of overrides, a goal and a search policy; every
point in a results ledger; local processes or Ray. See ``spec`` for the file, ``runner`` for
the run, ``ledger`` for what is kept. Ray and Optuna (the ``sweep`` extra) are imported only
by the executor and the policy that need them."""

from aisimulate_core.sweep.ledger import comparable
from aisimulate_core.sweep.runner import SweepResult, default_jobs, run_sweep
from aisimulate_core.sweep.spec import SweepError, SweepSpec, load_sweep

__all__ = ["SweepError", "SweepResult", "SweepSpec", "comparable", "default_jobs", "load_sweep",
           "run_sweep"]

"""The ``aisimulate`` command: ``aisimulate run PAYLOAD``, ``aisimulate plugins``, ``--version``."""

from aisimulate_core.cli.main import main, plugins_from_env, print_error
from aisimulate_core.cli.outputs import CliError
from aisimulate_core.cli.summary import ProgressLine, format_summary

__all__ = ["CliError", "ProgressLine", "format_summary", "main", "plugins_from_env", "print_error"]

"""``python -m aisimulate_core``: the ``aisimulate`` command."""

import sys

from aisimulate_core.cli import main

if __name__ == "__main__":
    sys.exit(main())

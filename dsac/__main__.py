"""``python -m dsac``: the command line of ``launch.py`` / ``dsac-train``."""

import sys

from dsac.cli import main

sys.exit(main())

"""``python scripts/export.py`` is ``dsac-export`` (``python -m dsac.export``), kept for old commands."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dsac.export import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

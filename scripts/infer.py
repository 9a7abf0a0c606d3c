"""``python scripts/infer.py`` is ``dsac-infer`` (``python -m dsac.infer``), kept for old commands."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dsac.infer import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

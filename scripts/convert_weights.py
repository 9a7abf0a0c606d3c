"""``python scripts/convert_weights.py`` is ``dsac-convert-weights`` (``python -m dsac.convert_weights``), kept for old commands."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dsac.convert_weights import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

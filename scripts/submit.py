"""``python scripts/submit.py`` is ``dsac-submit`` (``python -m dsac.submit``), kept for old commands."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dsac.submit import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

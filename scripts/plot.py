"""``python scripts/plot.py``: dsac's plot tool from a checkout, without installing dsac; the same
program as ``dsac-plot`` and ``python -m dsac.plot`` (its code is ``dsac/plot.py``)."""

import os
import sys

if __name__ == "__main__":
    # Run as a file, Python puts scripts/ first on the path: the checkout's root takes its place.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from dsac.plot import main

    sys.exit(main())

"""``python scripts/export.py``: dsac's export tool from a checkout, without installing dsac; the
same program as ``dsac-export`` and ``python -m dsac.export`` (its code is ``dsac/export.py``)."""

import os
import sys

if __name__ == "__main__":
    # Run as a file, Python puts scripts/ first on the path: the checkout's root takes its place.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from dsac.export import main

    sys.exit(main())

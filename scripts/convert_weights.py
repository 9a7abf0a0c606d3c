"""``python scripts/convert_weights.py``: dsac's weights converter from a checkout, without
installing dsac; the same program as ``dsac-convert-weights`` and ``python -m
dsac.convert_weights`` (its code is ``dsac/convert_weights.py``)."""

import os
import sys

if __name__ == "__main__":
    # Run as a file, Python puts scripts/ first on the path: the checkout's root takes its place.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from dsac.convert_weights import main

    sys.exit(main())

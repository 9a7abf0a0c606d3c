"""``python scripts/infer.py``: dsac's infer tool from a checkout, without installing dsac; the
same program as ``dsac-infer`` and ``python -m dsac.infer`` (its code is ``dsac/infer.py``)."""

import os
import sys

if __name__ == "__main__":
    # Run as a file, Python puts scripts/ first on the path: the checkout's root takes its place.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from dsac.infer import main

    sys.exit(main())

"""``python scripts/submit.py``: dsac's submit tool from a checkout, without installing dsac; the
same program as ``dsac-submit`` and ``python -m dsac.submit`` (its code is ``dsac/submit.py``)."""

import os
import sys

if __name__ == "__main__":
    # Run as a file, Python puts scripts/ first on the path: the checkout's root takes its place.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from dsac.submit import main

    sys.exit(main())

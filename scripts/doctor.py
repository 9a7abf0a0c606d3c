"""``python scripts/doctor.py``: dsac's doctor tool from a checkout, without installing dsac; the
same program as ``dsac-doctor`` and ``python -m dsac.doctor`` (its code is ``dsac/doctor.py``)."""

import os
import sys

if __name__ == "__main__":
    # Run as a file, Python puts scripts/ first on the path: the checkout's root takes its place.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from dsac.doctor import main

    sys.exit(main())

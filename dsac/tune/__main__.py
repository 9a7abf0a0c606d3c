import sys

from dsac.tune.cli import main

sys.exit(main())

"""dsac command line: train SAC or Ape-X DQN with Ray actors and tasks (the same program as
``dsac-train`` and ``python -m dsac``; see :mod:`dsac.cli`).

    python launch.py --env Pendulum-v1 --num_workers 8 --num_learners 1 --stop_return -200
"""

import sys

from dsac.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""dsac's measurement code: speed, scaling, learning against Stable-Baselines3, the MuJoCo and
Atari tables, stability and soak runs. Run it as ``python -m benchmarks <command>`` from the
repository's root (``python -m benchmarks --help`` lists the commands). Nothing in ``dsac``
imports it; SB3, torch and MuJoCo are imported only by the commands that need them
(``pip install -r requirements-bench.txt``).

Every command that runs learning writes result records — one JSON line per run with the command,
commit, date and machine (:func:`benchmarks.harness.provenance`) — from which its ``--report``
prints the table that ``docs/benchmarks.md`` shows.
"""

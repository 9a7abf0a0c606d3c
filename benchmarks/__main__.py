"""``python -m benchmarks <command> [options]``: one runner for dsac's measurements."""

from __future__ import annotations

import importlib
import sys

from dsac.errors import quiet_when_the_reader_leaves

# command -> (module of this package, what it measures)
COMMANDS = {
    "speed": ("speed", "collection, learner feed, weight sync and time to solve against SB3, in one table"),
    "scale": ("scale", "rollout workers of an expensive env on one machine and on a local multi-node cluster"),
    "parity": ("parity", "dsac's variants (serial, 1/2/8 workers) against SB3 with equal settings"),
    "sweep": ("sweep", "the defaults sweep: candidate settings on several tasks, ranked by time"),
    "stability": ("stability", "does a run hold what it learned: final return and area, several seeds"),
    "mujoco": ("mujoco", "the MuJoCo v5 table: dsac's defaults against SB3 with rl-zoo's settings"),
    "her": ("her", "goal-conditioned tasks: SAC with --her against SB3's SAC + HerReplayBuffer (rl-zoo)"),
    "atari": ("atari", "the Atari games table on a wall-clock budget, beside published figures"),
    "soak": ("soak", "a long run watched for memory growth and stuck roles"),
    "cpu-share": ("cpu_share", "where a run's CPU goes per role, and its useful share (updates + env steps)"),
    "threshold": ("threshold", "where run directories first reached a return"),
    "video-cost": ("video_cost", "what recording evaluation videos costs"),
    "learner-update": ("learner_update", "what one SAC update costs, plain and compiled with XLA (--learner_xla)"),
    "image-preprocessing": ("image_preprocessing", "CarRacing with and without ALE-style preprocessing"),
    "config-reach": ("config_reach", "which modules receive the whole config, and which only a section"),
    "fuzz": ("fuzz", "the weights decoder against mutated and hostile files: crashes, time and memory per byte"),
    "docs": ("docs", "rewrite the generated tables of README.md and docs/ (flags, results)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: python -m benchmarks <command> [options]   (python -m benchmarks <command> --help)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items()]
    return "\n".join(lines)


@quiet_when_the_reader_leaves
def main(argv: list[str] | None = None) -> int:
    from_command_line = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name = argv[0].replace("_", "-")  # video_cost as well as video-cost
    if name not in COMMANDS:
        print(f"benchmarks: error: unknown command {argv[0]!r}\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"benchmarks.{COMMANDS[name][0]}")
    if from_command_line:
        sys.argv[0] = f"python -m benchmarks {name}"  # what argparse shows as the program
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a run's configuration travels: the dsac modules whose functions receive the whole
:class:`dsac.config.Config`, and those that receive only one of its sections, in a short serial
run (``launch.py --local``: the command line, the trainer, the serial runner with the same
rollout, replay, learner loop, policy and learner the distributed run uses, the recorder).

    python -m benchmarks config-reach                      # this checkout
    cd <an older checkout> && PYTHONPATH=. python <this checkout>/benchmarks/config_reach.py

A call counts when one of its arguments *is* the Config (or a section); ``dsac.config`` and
``dsac.settings`` themselves are left out (their methods take the config as ``self``). The script
imports nothing else of ``benchmarks``, so the same file measures an older checkout, where
Config was one flat dataclass and had no sections.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile

RUN = ["--local", "--algo", "dqn", "--env", "CartPole-v1", "--total_env_steps", "1500", "--learning_starts", "500",
       "--eval_every", "1000", "--eval_episodes", "2", "--no-tensorboard", "--no-progress_bar", "--seed", "0"]
OWN = ("dsac.config", "dsac.settings")


def trace(argv: list[str]) -> dict:
    """Run ``launch.py argv`` in this process and return, per module, the functions that received
    the whole config and those that received a section."""
    import dsac.config
    from dsac import cli

    config_type = dsac.config.Config
    section_types = tuple(getattr(dsac.config, "SECTIONS", {}).values())
    whole: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    part: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def profile(frame, event, arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("dsac") or module in OWN:
            return
        code = frame.f_code
        values = [frame.f_locals.get(name) for name in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]]
        name = getattr(code, "co_qualname", code.co_name)
        if any(isinstance(value, config_type) for value in values):
            whole[module][name] += 1
        elif section_types and any(isinstance(value, section_types) for value in values):
            part[module][name] += 1

    sys.setprofile(profile)
    try:
        status = cli.main(argv)
    finally:
        sys.setprofile(None)
    return {"status": status, "whole": {m: dict(c) for m, c in sorted(whole.items())},
            "section_only": {m: dict(c) for m, c in sorted(part.items()) if m not in whole}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = trace([*RUN, "--output_dir", f"{tmp}/run"])
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    whole, part = result["whole"], result["section_only"]
    print(f"run: launch.py {' '.join(RUN)} (exit {result['status']})")
    print(f"modules receiving the whole Config: {len(whole)} ({sum(len(f) for f in whole.values())} functions, "
          f"{sum(sum(f.values()) for f in whole.values())} calls)")
    for module, functions in whole.items():
        print(f"  {module}: {', '.join(sorted(functions))}")
    print(f"modules receiving only a section: {len(part)}")
    for module, functions in part.items():
        print(f"  {module}: {', '.join(sorted(functions))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

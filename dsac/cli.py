"""dsac command line (``python launch.py``, ``dsac-train``, ``python -m dsac``): train SAC or
Ape-X DQN with Ray actors and tasks.

    python launch.py --env Pendulum-v1 --num_workers 8 --num_learners 1 --stop_return -200

Bad input stops with one line on stderr and exit status 2; a run that fails midway saves
what it learned and exits 1; Ctrl-C saves and exits 130, SIGTERM (``ray job stop``) 143.
"""

import time

STARTED_AT = time.time()  # wall_s in progress.jsonl counts from here (the program's start)

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from dsac.config import SECTION_OF, SECTIONS, Config, config_fields, suggest_key  # noqa: E402
from dsac.errors import DsacError, OneLineParser, quiet_when_the_reader_leaves  # noqa: E402

_TYPES = {"int": int, "float": float, "str": str}


def _parse_type(annotation: str):
    """'float | None' -> float, 'list[int]' -> int (with nargs)."""
    base = annotation.replace(" | None", "").replace("float | str", "str").strip()  # a number or a schedule
    if base.startswith("list["):
        base = base[5:-1]
    return _TYPES[base]


class _BooleanFlag(argparse.BooleanOptionalAction):
    """``--flag``, ``--no-flag``, or ``--flag true|false`` (how RLlib's and rl-zoo's users
    write a setting, and how a config file reads)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.nargs, self.metavar = "?", "true|false"

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string.startswith("--no-"):
            if values is not None:
                parser.error(f"{option_string} takes no value (use --{self.dest} {values})")
            setattr(namespace, self.dest, False)
        elif values is None:
            setattr(namespace, self.dest, True)
        elif values.strip().lower() in ("true", "false"):
            setattr(namespace, self.dest, values.strip().lower() == "true")
        else:
            parser.error(f"argument {option_string}: expected true or false, got {values!r}")


class _Parser(OneLineParser):
    def error(self, message):  # an unknown flag also gets the nearest known one
        if message.startswith("unrecognized arguments:"):
            flags = [option for action in self._actions for option in action.option_strings]
            unknown = [word for word in message.split(":", 1)[1].split() if word.startswith("--")]
            message += "".join(suggest_key(word.split("=")[0], flags) for word in unknown[:1])
        super().error(message)


def build_parser(suppress_defaults: bool = False) -> argparse.ArgumentParser:
    """A flag per :class:`dsac.config.Config` field, with its help text and default
    (``suppress_defaults``: only the flags actually given end up in the namespace)."""
    parser = _Parser(
        "dsac", prog=os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "launch.py",
        description="Distributed SAC and Ape-X DQN on Ray + TensorFlow 2 + gymnasium.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    groups = {name: parser.add_argument_group(f"{name} ({section.__doc__.splitlines()[0].rstrip('.')})")
              for name, section in SECTIONS.items()}
    for f in config_fields():
        if f.metadata.get("cli") is False:
            continue
        if "cli_type" in f.metadata:
            kwargs = {"type": f.metadata["cli_type"], "help": f.metadata["help"], "dest": f.name}
        elif f.type.startswith("bool"):  # --flag / --no-flag
            kwargs = {"action": _BooleanFlag, "help": f.metadata["help"], "dest": f.name}
        else:
            kwargs = {"type": _parse_type(f.type), "help": f.metadata["help"], "dest": f.name}
        if "nargs" in f.metadata:
            kwargs["nargs"] = f.metadata["nargs"]
        if "choices" in f.metadata and "action" not in kwargs:
            kwargs["choices"] = f.metadata["choices"]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        names = [f"--{f.name}", *(f"--{old}" for old in f.metadata.get("old_names", ()))]
        groups[SECTION_OF[f.name]].add_argument(*names, default=argparse.SUPPRESS if suppress_defaults else default,
                                                **kwargs)
    parser.add_argument(
        "--config", default=argparse.SUPPRESS if suppress_defaults else None,
        help="a .yaml or .json file of flag names and values (a run's config.json repeats that run, read as a "
             "record: docs/safety.md); flags given on the command line override it",
    )
    return parser


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    from dsac.runtime.tf_setup import own_this_process

    own_this_process()
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s dsac %(message)s", datefmt="%H:%M:%S", stream=sys.stdout
    )
    try:
        from dsac.errors import RunFailed
        from dsac.runtime.preparation import resume_config

        given = vars(build_parser(suppress_defaults=True).parse_args(argv))  # flags actually typed
        given.pop("config", None)
        if args.resume and args.config:
            raise DsacError(f"--resume {args.resume} continues with the config.json it was started with, not "
                            f"--config {args.config}: type the flags to change (--config starts a new run)")
        if args.resume:
            config = resume_config(args.resume, {k: v for k, v in given.items() if k != "resume"}).validate()
        elif args.config:  # the user's own file, typed: trusted; a run's config.json (a record) repeats it as data
            config = Config.load(args.config, given, source=f"--config {args.config}", trusted=True).validate()
        else:  # the typed flags only: a preset fills what was not typed, and Config has the defaults
            config = Config.from_dict(given).validate()
        if config.resources.local:  # --local --num_workers 2 typed: refused though 2 is the default
            config.resources.check_local(workers_typed="num_workers" in given)

        from dsac.runtime.runner import run

        if not config.resources.local:
            import ray  # noqa: F401 - Ray's log handlers exist once it is imported

            # Ray's own start-up messages go where dsac's log goes; stderr is kept for the error line.
            for handler in logging.getLogger("ray").handlers:
                if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr:
                    handler.setStream(sys.stdout)
        try:
            summary = run(config, started_at=STARTED_AT)
        except RunFailed as exc:
            print(f"dsac: run failed: {exc} (weights so far are saved)", file=sys.stderr)
            return 1
    except DsacError as exc:
        print(f"dsac: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dsac: interrupted", file=sys.stderr)
        return 130
    return 143 if summary["stop_reason"] == "sigterm" else 0



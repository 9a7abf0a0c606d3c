"""A search-space file: ``launch.py`` flag names mapped to a fixed value or a distribution.

    env: LunarLanderContinuous-v3
    local: true
    lr: {loguniform: [1.0e-4, 1.0e-3]}
    batch_size: {choice: [128, 256]}
    seed: {grid: [0, 1]}

``grid`` tries every value (``--num_samples`` times each); ``choice``, ``uniform`` and
``loguniform`` are sampled. The file is checked before Ray starts: unknown flags, unknown
kinds and bad ranges are one-line errors, and the first value of every entry must make a valid
config.

A run's record (its ``config.json``) given as the space is read by the rule of every file of
flags (:func:`dsac.config.file_values`): the code it names is refused without ``--trust_code``,
its ``address``, ``mlflow``, ``wandb``, ``storage_path``, ``init_weights`` and ``output_dir``
are left out, and each of its values is one fixed value (a record holds no distributions).
"""

from __future__ import annotations

from dsac.config import Config, file_values
from dsac.envs.make import make_env
from dsac.errors import DsacError
from dsac.settings.records import is_record, read_mapping

KINDS = ("grid", "choice", "uniform", "loguniform")


def _entry(name: str, value):
    """``(kind, argument)`` of a space entry, or ``(None, value)`` for a fixed value."""
    if not (isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value)), str)):
        return None, value
    kind, arg = next(iter(value.items()))
    if kind not in KINDS:
        raise DsacError(f"space: {name}: unknown kind {kind!r} (one of {', '.join(KINDS)})")
    if kind in ("grid", "choice"):
        if not isinstance(arg, list) or not arg:
            raise DsacError(f"space: {name}: {kind} takes a non-empty list, got {arg!r}")
    elif not (isinstance(arg, list) and len(arg) == 2 and all(isinstance(x, int | float) for x in arg)
              and arg[0] < arg[1] and (kind == "uniform" or arg[0] > 0)):
        raise DsacError(f"space: {name}: {kind} takes [low, high] with low < high"
                        f"{' and low > 0' if kind == 'loguniform' else ''}, got {arg!r}")
    return kind, arg


def parse_space(values: dict, fixed_only: bool = False) -> dict:
    """``{flag: (kind, argument)}`` (kind None: fixed), checked against dsac's flags;
    ``fixed_only``: every value is fixed (a record's ``{"grid": [...]}`` is a value, not a search)."""
    space = {name: (None, value) if fixed_only else _entry(name, value) for name, value in values.items()}
    # unknown flags and bad values: dsac's own one-line errors
    config = Config.from_dict(first_values(space)).validate()
    run = config.run
    make_env(run.env, run.env_kwargs, run.flatten_obs).close()  # an unknown env, before any trial
    return space


def first_values(space: dict) -> dict:
    """Every entry's first value (a grid's or choice's first, a range's low end): a trial's
    flags, for its resource request in the log."""
    return {name: (arg[0] if kind else arg) for name, (kind, arg) in space.items()}


def read_space(path: str, fixed: dict | None = None, trust_code: bool = False) -> dict:
    """:func:`parse_space` of a YAML or JSON file, with ``fixed`` values on top (checked with it).
    The file is read as every file of flags is (:func:`dsac.config.file_values`): the user's
    own space is as trusted as typing it; a run's record is data, whose code is imported only
    with ``trust_code``."""
    source = f"--space {path}"
    values = read_mapping(path, source)
    record = is_record(values)
    values = file_values(values, {**(fixed or {}), "trust_code": trust_code}, source, trusted=True, fresh_run=False)
    return parse_space({**values, **(fixed or {})}, fixed_only=record)


def tune_space(space: dict) -> dict:
    """The ``param_space`` of a ``tune.Tuner``."""
    from ray import tune

    make = {"grid": tune.grid_search, "choice": tune.choice,
            "uniform": lambda a: tune.uniform(*a), "loguniform": lambda a: tune.loguniform(*a)}
    return {name: make[kind](arg) if kind else arg for name, (kind, arg) in space.items()}


def mutations(space: dict) -> dict:
    """Population Based Training's ``hyperparam_mutations``: every sampled entry (grid points
    stay as they are)."""
    return {name: value for name, value in tune_space(space).items()
            if space[name][0] in ("choice", "uniform", "loguniform")}

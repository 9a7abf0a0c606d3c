"""A run's configuration: :class:`Config`, composed of one section per concern
(:mod:`dsac.settings.sections`, :class:`dsac.envs.atari.FrameSettings` for frames, and for the ``algorithm``
section the chosen algorithm's own dataclass, ``dsac/algorithms/<name>/config.py``). Every field
is also a flat ``launch.py`` flag and a flat attribute (``config.buffer_size`` is
``config.replay.buffer_size``), so ``Config(env=..., lr=...)``, ``--config`` files, RLlib-style
dicts and the ``config.json`` of older runs read as they always did.

This module is where flat names become sections (:data:`SECTION_OF`); the rest of dsac reads
sections. A setting of another algorithm than the config's (``--dueling`` with ``--algo sac``)
is accepted and left out, as a config.json of an older run holds every algorithm's settings;
one given with a value of its own is named in the log (:func:`ignored_settings`).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from dsac.algorithms import LONG_RUN_ENV_STEPS
from dsac.envs.atari import FrameSettings, is_atari_id
from dsac.errors import DsacError, did_you_mean
from dsac.formats.redaction import redact_uri, redact_value
from dsac.models.catalog import registered_models, resolve_builder
from dsac.settings.coercion import coerce_field
from dsac.settings.foreign_keys import suggest_key
from dsac.settings.presets import apply_preset
from dsac.settings.records import (
    NOT_FROM_A_FILE,
    RECORD_MARKER,
    is_record,
    read_mapping,
    record_values,
)
from dsac.settings.registry import (
    ALGOS,
    algorithm,
    algorithm_settings,
    load_object,
)
from dsac.settings.relations import check_named_code, check_relations
from dsac.settings.sections import (
    BATCHES_PER_SAMPLE,
    AlgorithmSettings,
    FlowSettings,
    ModelSettings,
    OutputSettings,
    ReplaySettings,
    ResourceSettings,
    RunSettings,
)

# The sections, in the order of ``--help`` and docs/guide.md. The algorithm section is the
# chosen algorithm's subclass of AlgorithmSettings (ALGORITHM_SETTINGS).
SECTIONS: dict[str, type] = {
    "run": RunSettings, "resources": ResourceSettings, "algorithm": AlgorithmSettings, "model": ModelSettings,
    "replay": ReplaySettings, "flow": FlowSettings, "frames": FrameSettings, "output": OutputSettings,
}
# --algo name -> the dataclass of its algorithm section (dsac/algorithms/<name>/config.py).
ALGORITHM_SETTINGS: dict[str, type] = {name: algorithm_settings(name) for name in ALGOS}


def _redacted_repr(section) -> str:
    """A section's repr with every string in it as :func:`dsac.formats.redaction.redact_value` shows it:
    a repr ends up in logs and tracebacks, where a tracker URI's password must not."""
    values = ", ".join(f"{f.name}={redact_value(getattr(section, f.name))!r}"
                       for f in dataclasses.fields(section) if f.repr)
    return f"{type(section).__qualname__}({values})"


for _section in {*SECTIONS.values(), *ALGORITHM_SETTINGS.values()}:
    _section.__repr__ = _redacted_repr


def section_fields(name: str) -> list[dataclasses.Field]:
    """The fields (flags) of section ``name``; the algorithm section's are every algorithm's,
    the shared ones first."""
    if name != "algorithm":
        return list(dataclasses.fields(SECTIONS[name]))
    fields: dict[str, dataclasses.Field] = {}
    for cls in (AlgorithmSettings, *ALGORITHM_SETTINGS.values()):
        for f in dataclasses.fields(cls):
            fields.setdefault(f.name, f)
    return list(fields.values())


def config_fields() -> list[dataclasses.Field]:
    """Every flat field of :class:`Config`, section by section (the flags, in order)."""
    return [f for name in SECTIONS for f in section_fields(name)]


# Each flat field name -> the section that holds it.
SECTION_OF: dict[str, str] = {f.name: name for name in SECTIONS for f in section_fields(name)}
assert not set(SECTION_OF) & set(SECTIONS), "a field may not share a section's name"
# Each setting of only some algorithms -> those algorithms.
ALGORITHMS_OF: dict[str, tuple[str, ...]] = {
    f.name: tuple(algo for algo, cls in ALGORITHM_SETTINGS.items()
                  if f.name in {g.name for g in dataclasses.fields(cls)})
    for f in section_fields("algorithm") if f.name not in {g.name for g in dataclasses.fields(AlgorithmSettings)}
}


# dsac's own flags renamed since: the old name still loads (flags, dicts, config.json of older runs).
RENAMED = {"snapshot_every": "checkpoint_every"}
# Keys of older versions that no longer mean anything (a config.json that has them still loads):
# pull_every (a worker polled for weights every N env steps; the parameter server now answers
# a waiting pull as soon as a newer version is pushed).
RETIRED = ("pull_every",)
# Settings that may hold a URI with credentials (a tracker's, a Ray client's, a cloud store's):
# config.json and a tracker's params get them as dsac.formats.redaction.redact_uri shows them.
URI_KEYS = ("mlflow", "wandb", "address", "storage_path")

log = logging.getLogger("dsac")

# Rollout workers per replay shard by default: a shard's add calls stay within what one core
# answers (dsac.distributed.topology.SHARD_ADD_CALLS_PER_S), and past this many writers a second
# shard comes before the workers' chunk periods grow (docs/scaling.md).
WORKERS_PER_REPLAY_SHARD = 64


# Keys of RLlib's ``config["model"]`` that dsac understands (the model section's fields).
MODEL_KEYS = ("fcnet_hiddens", "fcnet_activation", "conv_filters", "conv_activation", "custom_model",
              "custom_model_config", "normalize_obs")
# RLlib's model keys of Atari preprocessing (dsac's flags of the same names and meanings;
# RLlib's ``framestack: true`` stacks 4 frames).
MODEL_PREPROCESSING_KEYS = ("framestack", "dim", "grayscale")


def _qualified(obj) -> str | None:
    """``module:Name`` of a class/function (how config.json records it)."""
    if obj is None or isinstance(obj, str):
        return obj
    return f"{obj.__module__}:{obj.__qualname__}"


@dataclass(init=False)
class Config:
    """Everything a run needs, by concern: ``run``, ``resources``, ``algorithm``, ``model``,
    ``replay``, ``flow``, ``frames`` and ``output`` (each a frozen dataclass with its defaults and
    its check). ``algorithm`` is the chosen algorithm's own dataclass (``SACSettings``,
    ``DQNSettings``: :data:`ALGORITHM_SETTINGS`), so it holds that algorithm's settings only.
    Defaults follow Stable-Baselines3 / rl-zoo where they exist; a ``None`` is the algorithm's
    default, filled by :meth:`resolved`.

    Built from flat names (``Config(env="CartPole-v1", algo="dqn", lr=1e-3)``), sections
    (``Config(replay=ReplaySettings(buffer_size=10_000))``) or both; every field of the config
    reads flat too (``config.lr``; another algorithm's setting raises AttributeError). A config
    never changes: :meth:`replace` makes a changed copy (a change of ``algo`` keeps the shared
    algorithm settings).
    """

    run: RunSettings
    resources: ResourceSettings
    algorithm: AlgorithmSettings
    model: ModelSettings
    replay: ReplaySettings
    flow: FlowSettings
    frames: FrameSettings
    output: OutputSettings
    defaulted: list  # the fields resolve() filled with algorithm defaults (not saved)

    def __init__(self, *, defaulted=(), **values):
        changes: dict[str, dict] = {name: {} for name in SECTIONS}
        given = {}
        for key, value in values.items():
            if key in SECTIONS:
                if not isinstance(value, SECTIONS[key]):
                    raise TypeError(f"Config(): {key} must be a {SECTIONS[key].__name__}, got {type(value).__name__}")
                given[key] = value
            elif key in SECTION_OF:
                changes[SECTION_OF[key]][key] = value
            else:
                raise TypeError(f"Config() got an unexpected keyword argument '{key}'")
        for name, cls in SECTIONS.items():
            if name == "algorithm":
                continue
            section = dataclasses.replace(given[name], **changes[name]) if name in given else cls(**changes[name])
            object.__setattr__(self, name, section)
        object.__setattr__(self, "algorithm",
                           algorithm_section(self.run.algo, given.get("algorithm"), changes["algorithm"]))
        object.__setattr__(self, "defaulted", list(defaulted))

    def __setattr__(self, name, value):
        raise dataclasses.FrozenInstanceError(f"a Config does not change: config.replace({name}=...) makes a copy")

    def replace(self, **changes) -> Config:
        """A copy with some fields (flat names or whole sections) changed."""
        defaulted = changes.pop("defaulted", self.defaulted)
        return Config(**{**{name: getattr(self, name) for name in SECTIONS}, **changes}, defaulted=defaulted)

    def fields(self) -> list[dataclasses.Field]:
        """This config's fields, section by section: :func:`config_fields` less the settings of
        other algorithms than its own."""
        return [f for name in SECTIONS for f in dataclasses.fields(getattr(self, name))]

    def to_dict(self) -> dict:
        """Plain dict (JSON-safe) of every field, flat (one key per flag, as ``config.json`` holds
        it); classes and builders as ``module:Name``."""
        out = {f.name: getattr(getattr(self, SECTION_OF[f.name]), f.name) for f in self.fields()
               if f.name != "trust_code"}
        out["callbacks"] = _qualified(self.run.callbacks)
        out["policy_class"] = _qualified(self.run.policy_class)
        out["custom_models"] = {name: _qualified(b) for name, b in self.model.custom_models.items()}
        for key in URI_KEYS:  # their credentials never leave the process in it
            out[key] = redact_uri(out[key])
        return out

    def __repr__(self) -> str:
        return f"Config({', '.join(f'{name}={getattr(self, name)!r}' for name in SECTIONS)})"

    def record(self) -> dict:
        """What a run writes as its ``config.json``: :meth:`to_dict` marked as a run's record
        (``"dsac_record": 1``), which :meth:`load` reads as data, not as the user's word."""
        return {**self.to_dict(), RECORD_MARKER: 1}

    @classmethod
    def load(cls, path: str, overrides: dict | None = None, *, source: str | None = None,
             trusted: bool = False, fresh_run: bool = True) -> Config:
        """The one way a saved config is read: a YAML or JSON file of flag names (a run's
        ``config.json``, a user's ``--config`` file), changed by ``overrides``.

        Args:
            source: how errors name the file (default: the path).
            trusted: the file is the user's own (typed as ``--config``): as trusted as typing
                its flags — unless it is a run's record (:func:`is_record`). Any other file
                (``--resume``'s, ``Trainer.restore``'s) is a record, read by
                :func:`record_values`: code it names is refused unless ``overrides`` give the
                same value or ``overrides["trust_code"]`` is true, and its
                :data:`RECORD_EXCLUDED_KEYS` are left out (only ``overrides`` set them).
            fresh_run: a user's own file starts a run of its own: an output directory it names
                is left out (a record's always is).

        Raises:
            DsacError: one line naming the file and the problem.
        """
        source = source or path
        overrides = dict(overrides or {})
        values = file_values(read_mapping(path, source), overrides, source, trusted=trusted, fresh_run=fresh_run)
        try:
            return cls.from_dict({**values, **overrides})
        except DsacError as exc:
            raise DsacError(f"{source}: {exc}") from None

    @classmethod
    def from_dict(cls, values: dict) -> Config:
        """Build from a dict of flag names (plus RLlib's ``model`` dict), refusing unknown keys
        with a did-you-mean."""
        values = flat_values(values)  # Config.load's values are flat already: a no-op for them
        values.pop(RECORD_MARKER, None)  # a record's dict handed over in Python: the caller's own word
        for key in RETIRED:
            values.pop(key, None)
        for old, new in RENAMED.items():  # flags and config.json keys of older versions
            if old in values:
                value = values.pop(old)
                values.setdefault(new, value)
        names = list(SECTION_OF)
        for key in values:
            if not isinstance(key, str):
                raise DsacError(f"config keys must be strings, got {key!r}")
            if key not in names:
                raise DsacError(f"unknown config key {key!r}{suggest_key(key, names)}")
        run = RunSettings()
        values = apply_preset(values, run.env, run.algo)
        ignored = ignored_settings(values)
        if ignored:
            log.warning("--algo %s ignores %s: %s", values.get("algo", run.algo),
                        "another algorithm's setting" if len(ignored) == 1 else "other algorithms' settings",
                        ", ".join(f"--{key} ({'/'.join(ALGORITHMS_OF[key])})" for key in ignored))
        return cls(**values)

    def resolved(self) -> Config:
        """A copy with every "algorithm default" (None) filled in from the algorithm's
        :attr:`dsac.algorithms.Algorithm.defaults`."""
        run, resources, model = self.run, self.resources, self.model
        spec = algorithm(run.algo)
        defaults = {"batches_per_sample": BATCHES_PER_SAMPLE, **spec.defaults,
                    **(spec.atari_defaults if is_atari_id(run.env) else {})}
        budget = run.total_env_steps if run.total_env_steps is not None else defaults.get("total_env_steps", 0)
        if budget >= LONG_RUN_ENV_STEPS:
            defaults.update(spec.long_run_defaults)
        if run.her:  # relabeled goals score one-step transitions: n-step sums would mix goals
            defaults["n_step"] = 1
        fills = {key: value for key, value in defaults.items()
                 if key in SECTION_OF and getattr(getattr(self, SECTION_OF[key]), key, False) is None}
        if resources.num_replay_shards is None:  # one per learner, and one per 64 rollout workers (a plan
            # of several nodes may add some: dsac.distributed.topology.shards_for_nodes)
            fills["num_replay_shards"] = max(resources.num_learners,
                                             -(-resources.num_workers // WORKERS_PER_REPLAY_SHARD))
        fills["defaulted"] = sorted({*self.defaulted, *fills})
        if resources.num_workers == 0:  # RLlib's num_env_runners=0: everything in the driver
            fills["local"] = True
        # Ship the custom model this run names (registered, or module:builder) with the config,
        # and no other: every process unpickles what it is sent, and a builder's module (with
        # the TensorFlow it imports) would load in every rollout worker of every later run.
        models = {**registered_models(), **model.custom_models}
        name = model.custom_model
        if name and name not in models:
            if ":" in name:
                builder = load_object(name, "custom_model")
                if not callable(builder):
                    raise DsacError(f"custom_model {name!r} is a {type(builder).__name__}, not a callable "
                                    "that builds a Keras model")
                models[name] = builder
            else:
                resolve_builder(name, models)  # raises with close matches
        fills["custom_models"] = {name: models[name]} if name else {}
        # Load "module:Name" here, in the driver, so workers get the objects themselves
        # (shipped by value when their module is not importable there).
        for key in ("callbacks", "policy_class"):
            if isinstance(getattr(run, key), str):
                fills[key] = load_object(getattr(run, key), key)
        return self.replace(**fills)

    def validate(self) -> Config:
        """Fill algorithm defaults and check ranges and relations that need no environment or
        Ray; returns the resolved config. A config this returned is returned as it is: the
        command line, the runner and the preparation each ask, and the work is done once."""
        if self.__dict__.get("_validated"):
            return self
        config = self.coerced().resolved().check()
        object.__setattr__(config, "_validated", True)  # not a field: equality and replace() ignore it
        return config

    def coerced(self) -> Config:
        """A copy with every field of its declared type (see :func:`dsac.settings.coercion.coerce_field`)."""
        return self.replace(**{f.name: coerce_field(f.name, f.type, getattr(getattr(self, SECTION_OF[f.name]), f.name))
                               for f in self.fields()})

    def check(self) -> Config:
        """Check every section's ranges and the relations between sections, and the code the
        config names; returns the config. For a resolved config (no algorithm default left):
        :meth:`validate` resolves and checks."""
        for name in SECTIONS:
            getattr(self, name).check()
        check_relations(self.run, self.resources, self.algorithm, self.replay, self.model)
        check_named_code(self.run)
        return self


def file_values(values: dict, overrides: dict, source: str, *, trusted: bool, fresh_run: bool = True) -> dict:
    """The flags a mapping read from a file (``source``) gives a run, by the one rule of every
    entry point that reads a file of flags (``--config``, ``--resume``, ``Trainer.restore``,
    ``dsac-tune --space``): flat (a key nested in a section is checked as one at the top), less
    :data:`NOT_FROM_A_FILE`; a record (any file not ``trusted``, and a trusted one that
    :func:`is_record`) read by :func:`record_values`; a user's own file of a ``fresh_run`` less
    its ``output_dir``.

    Raises:
        DsacError: one line naming ``source``.
    """
    try:
        values = flat_values(values)
    except DsacError as exc:
        raise DsacError(f"{source}: {exc}") from None
    record = not trusted or is_record(values)
    values = {key: value for key, value in values.items() if key not in NOT_FROM_A_FILE}
    if record:
        return record_values(values, overrides, source)
    if fresh_run:
        values.pop("output_dir", None)
    return values


def flat_values(values: dict) -> dict:
    """``values`` with every key at the top: a section's group (``{"replay": {"buffer_size":
    ...}}``) and RLlib's ``model`` dict (model keys and ``framestack``/``dim``/``grayscale``)
    spread out, each key checked to belong where it stands and to be given once."""
    flat = {key: value for key, value in values.items() if key not in SECTIONS}
    for name in SECTIONS:
        if name not in values:
            continue
        group = values[name]
        if not isinstance(group, dict):
            raise DsacError(
                f"config key '{name}' must be a mapping (of its section's keys), got {type(group).__name__}"
            )
        for key, value in group.items():
            if name == "model":  # RLlib's model dict
                known = (*MODEL_KEYS, *MODEL_PREPROCESSING_KEYS)
                if key not in known:
                    raise DsacError(f"unknown model config key {key!r}{did_you_mean(str(key), known)}")
            elif SECTION_OF.get(RENAMED.get(key, key)) != name and key not in RETIRED:
                home = SECTION_OF.get(RENAMED.get(key, key)) if isinstance(key, str) else None
                if home is None:
                    raise DsacError(f"unknown config key {key!r}{suggest_key(str(key), list(SECTION_OF))}")
                raise DsacError(f"config key {key!r} belongs to section '{home}', not '{name}'")
            if key in flat:
                raise DsacError(f"config key {key!r} is given twice: at the top and in '{name}'")
            flat[key] = value
    return flat


def algorithm_section(algo, given: AlgorithmSettings | None, changes: dict) -> AlgorithmSettings:
    """The algorithm section of a config of ``--algo algo``, of that algorithm's own dataclass:
    ``given`` (of another algorithm: its shared settings) changed by ``changes``; settings of
    other algorithms are left out. An unknown ``algo`` gets the shared settings only (resolving
    the config says what is wrong with it)."""
    cls = ALGORITHM_SETTINGS.get(algo, AlgorithmSettings) if isinstance(algo, str) else AlgorithmSettings
    names = {f.name for f in dataclasses.fields(cls)}
    own = {key: value for key, value in changes.items() if key in names}
    if type(given) is cls:
        return dataclasses.replace(given, **own)
    carried = {f.name: getattr(given, f.name) for f in dataclasses.fields(given) if f.name in names} if given else {}
    return cls(**{**carried, **own})


def ignored_settings(values: dict) -> list[str]:
    """The keys of flat ``values`` that are settings of other algorithms than ``values``'s
    ``algo`` and say something of their own: not their field's default, nor an algorithm's
    default (a config.json of an older run holds them all)."""
    algo = values.get("algo", RunSettings().algo)
    if not isinstance(algo, str) or algo not in ALGORITHM_SETTINGS:
        return []
    ignored = []
    for key, value in values.items():
        owners = ALGORITHMS_OF.get(key, (algo,))
        if algo in owners or value is None:
            continue
        fields = {f.name: f for f in dataclasses.fields(ALGORITHM_SETTINGS[owners[0]])}
        known = [fields[key].default] + [getattr(algorithm(owner), kind).get(key) for owner in owners
                                          for kind in ("defaults", "atari_defaults", "image_defaults")]
        if value not in known:
            ignored.append(key)
    return ignored


def _flat(section: str, name: str, help: str | None) -> property:
    if section != "algorithm" or name not in ALGORITHMS_OF:
        return property(lambda self: getattr(getattr(self, section), name), doc=help)

    def read(self):
        try:
            return getattr(self.algorithm, name)
        except AttributeError:
            raise AttributeError(f"'{name}' is a setting of --algo {' and '.join(ALGORITHMS_OF[name])}, not of "
                                 f"--algo {self.run.algo}") from None

    return property(read, doc=help)


for _field in config_fields():
    setattr(Config, _field.name, _flat(SECTION_OF[_field.name], _field.name, _field.metadata.get("help")))

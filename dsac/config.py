"""One flat configuration for a run: every field is a CLI flag of ``launch.py``.

Each field carries its help text in ``metadata["help"]`` so the CLI, the guide (docs/guide.md) and
``config.json`` all describe the same thing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from dataclasses import dataclass, field

from dsac import schedules
from dsac.atari import is_atari_id
from dsac.errors import DsacError, did_you_mean
from dsac.files import read_text
from dsac.models.catalog import ACTIVATIONS, registered_models, resolve_builder
from dsac.registry import ALGOS, algorithm, load_object, load_subclass, refuse_untrusted_code


def _f(default, help: str, **kw):
    """A dataclass field with help text (lists and dicts get a default factory)."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


def _json_flag(text: str, kind: type, example: str):
    """A flag's JSON value of type ``kind`` (argparse reports the error in one line)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, kind):
        name = {dict: "object", list: "list"}[kind]
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON {name} like '{example}'")
    return value


def json_object(text: str) -> dict:
    """``--env_kwargs`` and the like: a JSON object."""
    return _json_flag(text, dict, '{"key": 1}')


def json_list(text: str) -> list:
    """``--conv_filters``: a JSON list."""
    return _json_flag(text, list, "[[32, 8, 4], [64, 4, 2]]")


# What RLlib and Stable-Baselines3 call some of dsac's keys, for "did you mean" — only where the
# foreign key means the same thing.
ALIASES = {
    "learning_rate": "lr", "train_batch_size": "batch_size", "num_env_runners": "num_workers",
    "num_rollout_workers": "num_workers", "num_envs_per_env_runner": "envs_per_worker",
    "num_envs_per_worker": "envs_per_worker", "replay_buffer_capacity": "buffer_size",
    "num_steps_sampled_before_learning_starts": "learning_starts", "total_timesteps": "total_env_steps",
    "timesteps_total": "total_env_steps", "initial_alpha": "init_alpha", "n_step_return": "n_step",
    "evaluation_duration": "eval_episodes", "env_config": "env_kwargs",
    "max_failures": "max_restarts",
}
# Foreign keys that mean something close but different: what to write instead.
FOREIGN_MEANINGS = {
    "train_freq": "--updates_per_step: SB3's train_freq is env steps between updates; train_freq k with "
                  "gradient_steps g is --updates_per_step g/k",
    "gradient_steps": "--updates_per_step: SB3's gradient_steps g per train_freq k env steps is --updates_per_step g/k",
    "training_intensity": "--updates_per_step: RLlib's training_intensity counts replayed transitions per sampled "
                          "one, which is --updates_per_step times --batch_size",
    "ent_coef": "--init_alpha: dsac always tunes the entropy coefficient; SB3's ent_coef 'auto_0.1' is "
                "--init_alpha 0.1",
    "evaluation_interval": "--eval_every: RLlib counts training iterations, --eval_every env steps",
    "checkpoint_freq": "--checkpoint_every: Tune counts training iterations, --checkpoint_every seconds",
}
# dsac's own flags renamed since: the old name still loads (flags, dicts, config.json of older runs).
RENAMED = {"snapshot_every": "checkpoint_every"}
# Keys of older versions that no longer mean anything (a config.json that has them still loads):
# pull_every (a worker polled for weights every N env steps; the parameter server now answers
# a waiting pull as soon as a newer version is pushed).
RETIRED = ("pull_every",)
# Settings that take a schedule (dsac.schedules) as well as a number.
SCHEDULED = ("lr",)
# Rollout workers per replay shard by default: a shard takes ~1,000 add calls/s, and 64 workers
# send it ~200 (a chunk every 0.32 s each, dsac.distributed.topology.SHARD_ADD_CALLS_PER_S), so
# shards are added past 64 workers before chunks grow past a third of a second (docs/scaling.md).
WORKERS_PER_REPLAY_SHARD = 64


def suggest_key(key: str, names) -> str:
    """`` (did you mean x?)`` for a misspelt or foreign config key / flag."""
    bare = key.lstrip("-").split("=")[0]
    dashes = key[: len(key) - len(key.lstrip("-"))]
    if bare in ALIASES:
        return f" (did you mean {dashes}{ALIASES[bare]}?)"
    if bare in FOREIGN_MEANINGS:
        return f" (did you mean {FOREIGN_MEANINGS[bare]})"
    return did_you_mean(key, names)


# Keys of RLlib's ``config["model"]`` that dsac understands; they live flat in Config.
MODEL_KEYS = ("fcnet_hiddens", "fcnet_activation", "conv_filters", "conv_activation", "custom_model",
              "custom_model_config")
# RLlib's model keys of Atari preprocessing (dsac's flags of the same names and meanings;
# RLlib's ``framestack: true`` stacks 4 frames).
MODEL_PREPROCESSING_KEYS = ("framestack", "dim", "grayscale")


def _qualified(obj) -> str | None:
    """``module:Name`` of a class/function (how config.json records it)."""
    if obj is None or isinstance(obj, str):
        return obj
    return f"{obj.__module__}:{obj.__qualname__}"


def _utf8(name: str, value) -> None:
    """Refuse text that is not valid UTF-8 (undecodable bytes on the command line arrive as
    lone surrogates), wherever it sits in a nested value."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise DsacError(f"--{name} is not valid UTF-8 text") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _utf8(name, key)
            _utf8(name, item)
    elif isinstance(value, list | tuple):
        for item in value:
            _utf8(name, item)


def _to_int(name: str, value) -> int:
    """An integer from an int, an integral float or a string of one (YAML reads ``1e6`` as a
    string)."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value.strip()) if any(c in value for c in ".eE") else int(value.strip())
        except ValueError:
            raise DsacError(f"--{name} must be an integer, got {value!r}") from None
    if isinstance(number, float) and math.isfinite(number) and number.is_integer():
        number = int(number)
    if isinstance(number, bool) or not isinstance(number, int):
        raise DsacError(f"--{name} must be an integer, got {value!r}")
    return number


def _to_float(name: str, value) -> float:
    """A float from a number or a string of one (``"0.99"``, YAML's ``1e-3``)."""
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise DsacError(f"--{name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DsacError(f"--{name} must be a number, got {value!r}")
    return float(value)


def _to_bool(name: str, value) -> bool:
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise DsacError(f"--{name} must be true or false, got {value!r}")
    return value


def coerce_field(name: str, annotation: str, value):
    """``value`` as the type of field ``name`` (its annotation, e.g. ``"float | None"``):
    strings that read as numbers become numbers; anything else of the wrong type is a
    one-line error."""
    _utf8(name, value)
    base = annotation.replace(" | None", "").strip()
    if value is None:
        if "None" in annotation or base == "object":
            return None
        raise DsacError(f"--{name} needs a value, got null")
    if name == "framestack":
        return framestack_value(value)
    if name in SCHEDULED:
        return schedules.as_config_value(name, value)
    if base == "int":
        return _to_int(name, value)
    if base == "float":
        return _to_float(name, value)
    if base == "bool":
        return _to_bool(name, value)
    if base == "str" and not isinstance(value, str):
        raise DsacError(f"--{name} must be a string, got {value!r}")
    if base == "list[int]":
        if not isinstance(value, list | tuple):
            raise DsacError(f"--{name} must be a list of integers like [64, 64], got {value!r}")
        return [_to_int(name, item) for item in value]
    if base == "dict" and not isinstance(value, dict):
        raise DsacError(f"--{name} must be a mapping, got {value!r}")
    return value


def framestack_value(value) -> int:
    """``--framestack``: a frame count, or RLlib's ``true`` (4 frames) / ``false`` (1)."""
    if isinstance(value, bool) or (isinstance(value, str) and value.strip().lower() in ("true", "false")):
        return 4 if _to_bool("framestack", value) else 1
    return _to_int("framestack", value)


def _cli_framestack(text: str) -> int:
    try:
        return framestack_value(text)
    except DsacError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def read_mapping(path: str, source: str) -> dict:
    """A YAML (``.yaml``/``.yml``) or JSON file holding a mapping, with one-line errors."""
    yaml_file = path.endswith((".yaml", ".yml"))
    text = read_text(path, source)
    try:
        if yaml_file:
            import yaml

            values = yaml.safe_load(text)
        else:
            values = json.loads(text)
    except Exception as exc:  # yaml.YAMLError / json.JSONDecodeError: say where, in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DsacError(f"{source}: not valid {'YAML' if yaml_file else 'JSON'} ({first})") from None
    if not isinstance(values, dict):
        raise DsacError(f"{source}: must hold a mapping of flag names to values")
    return values


@dataclass
class Config:
    """Everything a run needs. Defaults follow Stable-Baselines3 / rl-zoo where they exist."""

    # --- what to train -----------------------------------------------------------------
    algo: str = _f("sac", "algorithm: sac (continuous actions) or dqn (discrete actions)", choices=ALGOS)
    env: str = _f("Pendulum-v1", "gymnasium environment id, or module:env-id / module:ClassName of your own")
    env_kwargs: dict = _f({}, 'keyword arguments of the env, as JSON: \'{"g": 9.81}\'', cli_type=json_object)
    flatten_obs: bool = _f(False, "flatten Dict/Tuple/Discrete/image observations into one flat Box")
    env_step_ms: float = _f(
        0.0, "rollout envs: each step takes at least this many milliseconds of wall time, sleeping, not computing "
        "(a stand-in for an expensive simulator, a robot or a remote service: benchmarks/scale.py)"
    )
    env_reset_ms: float = _f(0.0, "rollout envs: each reset takes at least this many milliseconds (as --env_step_ms)")
    seed: int = _f(0, "random seed (envs, networks, replay sampling)")

    # --- topology ----------------------------------------------------------------------
    num_workers: int = _f(2, "rollout worker tasks (0: the serial runner, as --local)")
    local: bool = _f(
        False, "run rollout, replay, learner and evaluator in this one process without Ray (same classes, same "
        "files): for stepping through a custom env, model, policy or callback in a debugger, and tiny runs"
    )
    envs_per_worker: int = _f(1, "environments each rollout worker steps as one batch")
    num_learners: int = _f(1, "learner tasks; more than 1 train data-parallel (synchronous gradient averaging)")
    address: str | None = _f(None, "Ray cluster to join (default: RAY_ADDRESS, else a local Ray)")
    worker_cpus: float | None = _f(None, "CPUs requested per rollout worker (default: fit the cluster)")
    learner_gpus: float | None = _f(None, "GPUs for the learner (default: 1 if the cluster has one, else 0)")
    learner_threads: int | None = _f(
        None, "TensorFlow threads of a learner (default: its node's cores, at most 4: rollout workers mostly "
        "wait for the learner, so it may use the cores they leave idle)"
    )

    # --- stopping ----------------------------------------------------------------------
    total_env_steps: int | None = _f(None, "stop after this many env steps, all workers together (algorithm default)")
    stop_return: float | None = _f(None, "stop when the evaluation mean return reaches this")
    max_seconds: float | None = _f(None, "stop after this many wall-clock seconds")

    # --- evaluation and output ---------------------------------------------------------
    eval_every: int | None = _f(None, "evaluate every this many env steps (algorithm default)")
    eval_episodes: int | None = _f(None, "deterministic episodes per evaluation (algorithm default)")
    video_every: int = _f(0, "record episode 0 of every this-many-th evaluation, and of the final one, as "
                             "<output_dir>/videos/<env_steps>.mp4, the best of them as videos/best.mp4 (0: off)")
    output_dir: str | None = _f(
        None, "run directory (default: <storage_path>/<algo>-<env>-<timestamp>)"
    )
    storage_path: str | None = _f(
        None, "where run directories go: a path every node can reach (NFS) on a cluster (default: runs/, "
        "or ~/dsac_runs inside a Ray job)"
    )
    log_every: float = _f(10.0, "seconds between progress lines when stdout is not a terminal")
    progress_bar: bool = _f(True, "a live progress bar when stdout is a terminal (else a line every --log_every s)")
    tensorboard: bool = _f(True, "write TensorBoard event files to <output_dir>/tb")
    wandb: str | None = _f(None, "also log the config, each progress row, the videos and the final weights to this "
                                 "Weights & Biases project (pip install -e \".[wandb]\"; WANDB_MODE=offline: files only)")
    mlflow: str | None = _f(None, "also log them to this MLflow tracking URI (http://host:5000, sqlite:///runs.db, a "
                                  "directory; pip install -e \".[mlflow]\"; experiment: MLFLOW_EXPERIMENT_NAME, else dsac)")
    steps_per_iteration: int = _f(1_000, "env steps one Trainer.train() call collects")
    checkpoint_every: float | None = _f(
        30.0, "seconds between checkpoints of the full training state (networks, optimizer, targets, entropy "
        "coefficient, counters) into <output_dir>/checkpoint; a restarted learner or parameter server resumes from "
        "the latest (one is always written at the end; old name: --snapshot_every)", old_names=("snapshot_every",)
    )
    checkpoint_replay: bool = _f(False, "include the replay buffer's contents in checkpoints (compressed .npz)")
    max_restarts: int = _f(
        10, "times each role (rollout worker, learner, evaluator, replay shard, parameter server) is restarted "
        "after its process died (killed, out of memory, node lost) before the run stops"
    )
    env_restarts: int = _f(
        0, "times in the whole run an env that raised (in a rollout worker or the evaluator) is rebuilt, its broken "
        "episode dropped, before the next such error ends the run (0: the first one ends it)"
    )
    max_nonfinite_updates: int = _f(
        100, "updates in a row with a non-finite loss or gradient (each skipped) that stop the run"
    )
    resume: str | None = _f(None, "continue the run in this directory from its checkpoint")
    init_weights: str | None = _f(
        None, "start acting from a weights.pkl dsac wrote (e.g. a best_weights.pkl), the target networks of what it holds "
        "copied from it; critics and optimizer start fresh"
    )
    trust_code: bool = _f(
        False, "import code that a file names: the env module, policy_class, callbacks or custom_model of an "
        "--init_weights file or of the config.json --resume reads (values you type need no consent); never saved"
    )
    verbose: bool = _f(False, "show TensorFlow's own start-up and log output, and Ray's own paragraphs about dead "
                              "workers (hidden by default: dsac says in one line what died)")

    # --- learning (shared) ---------------------------------------------------------------
    gamma: float = _f(0.99, "discount factor")
    tau: float = _f(0.005, "polyak averaging coefficient of the target critics (sac)")
    lr: float | str | None = _f(None, "Adam learning rate of every network: a number or a schedule, "
                                "'linear(start, end[, fraction])' or rl-zoo's 'lin_<start>' (algorithm default)")
    batch_size: int | None = _f(None, "transitions per gradient update (algorithm default)")
    buffer_size: int | None = _f(None, "replay capacity in transitions (algorithm default)")
    fcnet_hiddens: list[int] | None = _f(
        None, "hidden layer sizes of every built-in MLP, after the conv encoder for images (algorithm default)",
        nargs="+"
    )
    fcnet_activation: str = _f("relu", "activation of the built-in MLPs", choices=ACTIVATIONS)
    conv_filters: list | None = _f(
        None, "conv encoder of image observations, [[out_channels, kernel, stride], ...] as JSON (RLlib's model key; "
        "default: by frame size, the Nature DQN encoder for 84x84)", cli_type=json_list
    )
    conv_activation: str = _f("relu", "activation of the conv layers", choices=ACTIVATIONS)
    custom_model: str | None = _f(
        None, "a model registered with dsac.register_custom_model, or module:builder (replaces the MLPs)"
    )
    custom_model_config: dict = _f({}, "keyword settings passed to the custom model builder", cli=False)
    custom_models: dict = _f({}, "name -> builder; filled from the registry when the config is resolved", cli=False)
    defaulted: list = _f([], "the fields resolve() filled with algorithm defaults (not saved)", cli=False)
    callbacks: object = _f(None, "a dsac.Callbacks subclass, or module:Class", cli_type=str)
    policy_class: object = _f(None, "a dsac.Policy subclass replacing the algorithm's, or module:Class", cli_type=str)
    init_alpha: float = _f(1.0, "initial entropy coefficient (sac)")
    target_entropy: float | None = _f(None, "entropy target (sac; default: -|A|)")
    start_steps: int | None = _f(None, "uniform random actions for this many env steps, all workers together (algorithm default)")
    learning_starts: int | None = _f(None, "env steps in replay before the first update (algorithm default)")
    updates_per_step: float | None = _f(None, "gradient updates per env step, enforced by the replay rate limiter (algorithm default)")

    # --- replay ------------------------------------------------------------------------
    n_step: int | None = _f(None, "rewards summed per stored transition (algorithm default)")
    prioritized: bool | None = _f(None, "proportional prioritized replay (algorithm default: on for dqn)")
    priority_alpha: float = _f(0.6, "prioritization exponent alpha")
    priority_beta: float = _f(0.4, "initial importance-weight exponent beta, annealed to 1 over the run")
    num_replay_shards: int | None = _f(
        None, "replay buffer actors; each worker writes to one, each learner samples its own (default: one per learner "
        "and at least one per 64 workers)"
    )

    # --- DQN (Mnih et al. 2015; Ape-X, Horgan et al. 2018) --------------------------------
    dueling: bool = _f(True, "dueling value/advantage heads (dqn)")
    double_q: bool = _f(True, "double Q-learning targets (dqn)")
    target_update_every: int | None = _f(None, "hard target-network copy every this many updates (dqn; algorithm "
                                         "default)")
    grad_clip: float = _f(10.0, "global gradient-norm clip (dqn)")
    num_atoms: int = _f(1, "C51 atoms of the return distribution; 1 = expected Q (dqn)")
    v_min: float = _f(-10.0, "lowest C51 atom (dqn)")
    v_max: float = _f(10.0, "highest C51 atom (dqn)")
    epsilon: float = _f(0.4, "Ape-X base exploration: worker i uses epsilon^(1 + epsilon_alpha*i/(N-1)) (dqn)")
    epsilon_alpha: float = _f(7.0, "Ape-X exploration spread across workers (dqn)")
    exploration_fraction: float = _f(0.1, "one worker: epsilon decays linearly over this fraction of the run (dqn)")
    final_epsilon: float = _f(0.02, "one worker: epsilon at the end of its decay (dqn)")

    # --- Frames: ALE ids, and other envs' large frames (see dsac/atari.py) -----------------
    framestack: int = _f(4, "frames stacked into one observation (RLlib's model key; true = 4, false = 1)",
                         cli_type=_cli_framestack)
    dim: int = _f(84, "side of the square frames in pixels (RLlib's model key)")
    grayscale: bool = _f(True, "one channel per frame instead of RGB (RLlib's model key)")
    preprocess_images: bool = _f(True, "also resize, gray and stack other envs' large uint8 frames (side >= 72, "
                                 "e.g. CarRacing-v3) as ALE's are; false: their raw frames")
    noop_max: int = _f(30, "at most this many no-op actions after each reset (a random count)")
    frame_skip: int = _f(4, "each action repeats this many frames, the last two max-pooled")
    terminal_on_life_loss: bool = _f(True, "training only: a lost life ends the episode for learning; "
                                     "returns are still whole games")
    clip_rewards: bool = _f(True, "training only: rewards become their sign; returns are still the game's score")
    sticky_actions: bool = _f(True, "keep ALE v5's repeat-action probability 0.25 (Machado et al. 2018); false: 0")

    # --- data flow -----------------------------------------------------------------------
    max_steps_ahead: int = _f(128, "env steps collection may run ahead of the update ratio")
    # 16 batches per sample call and a push every 20 updates (were 4 and 10): a third fewer
    # seconds to solve CartPole-v1 (DQN, 4 workers) and Pendulum-v1 (SAC, 2 workers) on 2
    # cores, the same env steps — the replay actor's cost is per call, not per batch.
    batches_per_sample: int = _f(16, "batches one replay sample call returns")
    prefetch: int = _f(2, "replay sample calls the learner keeps in flight")
    push_every: int = _f(20, "learner pushes weights every this many updates (after the sample call's batches that pass it)")
    chunk_seconds: float = _f(0.1, "a rollout worker sends what it gathered this often, or once it holds 128 "
                                    "transitions if that takes longer (at most 1 s)")
    max_chunk: int = _f(1024, "most transitions in one replay add call")

    def to_dict(self) -> dict:
        """Plain dict (JSON-safe) of every field; classes and builders as ``module:Name``."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("trust_code", "defaulted")}
        out["callbacks"] = _qualified(self.callbacks)
        out["policy_class"] = _qualified(self.policy_class)
        out["custom_models"] = {name: _qualified(b) for name, b in self.custom_models.items()}
        return out

    @classmethod
    def load(cls, path: str, overrides: dict | None = None, *, source: str | None = None,
             trusted: bool = False, fresh_run: bool = True) -> Config:
        """The one way a saved config is read: a YAML or JSON file of flag names (a run's
        ``config.json``, a user's ``--config`` file), changed by ``overrides``.

        Args:
            source: how errors name the file (default: the path).
            trusted: the file may name code to import (a file the user typed as ``--config``
                is theirs); otherwise a ``module:Name`` it holds is refused unless
                ``overrides`` give the same value (see :func:`dsac.registry.refuse_untrusted_code`)
                or ``overrides["trust_code"]`` is true.
            fresh_run: a run's saved config repeats that run in a new directory: its output
                directory and resume target are left out.

        Raises:
            DsacError: one line naming the file and the problem.
        """
        source = source or path
        values = read_mapping(path, source)
        overrides = dict(overrides or {})
        values.pop("custom_models", None)  # builders come from the registry or module:Name
        values.pop("defaulted", None)
        values.pop("trust_code", None)  # consent is given by the caller, never by the file
        if fresh_run:
            values.pop("output_dir", None)
            values.pop("resume", None)
        if not (trusted or overrides.get("trust_code")):
            refuse_untrusted_code(values, source, overrides)
        try:
            return cls.from_dict({**values, **overrides})
        except DsacError as exc:
            raise DsacError(f"{source}: {exc}") from None

    @classmethod
    def from_dict(cls, values: dict) -> Config:
        """Build from a dict of flag names (plus RLlib's ``model`` dict), refusing unknown keys
        with a did-you-mean."""
        values = dict(values)
        model = values.pop("model", None) or {}
        if not isinstance(model, dict):
            raise DsacError(f"config key 'model' must be a dict, got {type(model).__name__}")
        for key in model:
            if key not in (*MODEL_KEYS, *MODEL_PREPROCESSING_KEYS):
                known = (*MODEL_KEYS, *MODEL_PREPROCESSING_KEYS)
                raise DsacError(f"unknown model config key '{key}'{did_you_mean(key, known)}")
        values.update(model)
        for key in RETIRED:
            values.pop(key, None)
        for old, new in RENAMED.items():  # flags and config.json keys of older versions
            if old in values:
                value = values.pop(old)
                values.setdefault(new, value)
        names = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if not isinstance(key, str):
                raise DsacError(f"config keys must be strings, got {key!r}")
            if key not in names:
                raise DsacError(f"unknown config key '{key}'{suggest_key(key, names)}")
        return cls(**values)

    def resolved(self) -> Config:
        """A copy with every "algorithm default" (None) filled in from the algorithm's
        :attr:`dsac.algorithms.Algorithm.defaults`."""
        spec = algorithm(self.algo)
        defaults = {**spec.defaults, **(spec.atari_defaults if is_atari_id(self.env) else {})}
        fills = {k: v for k, v in defaults.items() if getattr(self, k) is None}
        if self.num_replay_shards is None:  # one per learner, and one per 64 rollout workers (a plan of
            # several nodes may add some: dsac.distributed.topology.shards_for_nodes)
            fills["num_replay_shards"] = max(self.num_learners, -(-self.num_workers // WORKERS_PER_REPLAY_SHARD))
        fills["defaulted"] = sorted({*self.defaulted, *fills})
        if self.num_workers == 0:  # RLlib's num_env_runners=0: everything in the driver
            fills["local"] = True
        # Ship the registered custom models (and any module:builder named) with the config.
        models = {**registered_models(), **self.custom_models}
        if self.custom_model and self.custom_model not in models:
            if ":" in self.custom_model:
                builder = load_object(self.custom_model, "custom_model")
                if not callable(builder):
                    raise DsacError(f"custom_model {self.custom_model} is a {type(builder).__name__}, not a callable "
                                    "that builds a Keras model")
                models[self.custom_model] = builder
            else:
                resolve_builder(self.custom_model, models)  # raises with close matches
        fills["custom_models"] = models
        # Load "module:Name" here, in the driver, so workers get the objects themselves
        # (shipped by value when their module is not importable there).
        for key, kind in (("callbacks", "callbacks"), ("policy_class", "policy_class")):
            if isinstance(getattr(self, key), str):
                fills[key] = load_object(getattr(self, key), kind)
        return dataclasses.replace(self, **fills)

    def validate(self) -> Config:
        """Fill algorithm defaults and check ranges and relations that need no environment or
        Ray; returns the resolved config."""
        return self.coerced().resolved()._check()

    def coerced(self) -> Config:
        """A copy with every field of its declared type (see :func:`coerce_field`)."""
        return dataclasses.replace(self, **{
            f.name: coerce_field(f.name, f.type, getattr(self, f.name)) for f in dataclasses.fields(self)
        })

    def _check(self) -> Config:
        check_ranges(self)
        check_relations(self)
        check_named_code(self)
        return self



def check_local(config: Config) -> None:
    """The serial runner takes no flag that only means something with Ray."""
    for name, value, fine in (
        ("num_learners", config.num_learners, 1), ("num_replay_shards", config.num_replay_shards, 1),
        ("address", config.address, None), ("worker_cpus", config.worker_cpus, None),
        ("learner_gpus", config.learner_gpus, None),
    ):
        if value != fine:
            raise DsacError(f"--{name} {value} needs Ray: the serial runner (--local / --num_workers 0) runs one "
                            "learner and one replay buffer in this process")


def check_schedules(config: Config) -> None:
    """A scheduled setting's numbers in range."""
    for name in SCHEDULED:
        value = schedules.parse(name, getattr(config, name))
        ends = (value,) if isinstance(value, float) else (value.start, value.end)
        if not (math.isfinite(ends[0]) and ends[0] > 0 and all(math.isfinite(v) and v >= 0 for v in ends)):
            raise DsacError(f"--{name} must be a positive number (a schedule: start > 0, end >= 0), got {value}")


def check_ranges(config: Config) -> None:
    """Every number in its range, every field of its kind (one line naming the flag)."""
    if isinstance(config.num_workers, bool) or not isinstance(config.num_workers, int) or config.num_workers < 0:
        raise DsacError(f"--num_workers must be an integer >= 0, got {config.num_workers!r}")
    if config.local:
        check_local(config)
    positive_ints = (
        "envs_per_worker", "num_learners", "total_env_steps", "eval_every",
        "eval_episodes", "batch_size", "buffer_size", "batches_per_sample", "prefetch",
        "push_every", "max_chunk", "max_steps_ahead", "n_step", "num_replay_shards",
        "target_update_every", "num_atoms", "steps_per_iteration", "max_nonfinite_updates",
    )
    for name in positive_ints:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise DsacError(f"--{name} must be a positive integer, got {value!r}")
    for name in ("start_steps", "learning_starts"):
        if getattr(config, name) < 0:
            raise DsacError(f"--{name} must be >= 0, got {getattr(config, name)!r}")
    check_schedules(config)
    positive_floats = ("updates_per_step", "init_alpha", "log_every", "chunk_seconds", "grad_clip")
    for name in positive_floats:
        value = getattr(config, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise DsacError(f"--{name} must be a positive number, got {value!r}")
    for name in ("gamma", "tau", "epsilon", "exploration_fraction"):
        value = getattr(config, name)
        if not (0.0 < value <= 1.0):
            raise DsacError(f"--{name} must be in (0, 1], got {value!r}")
    for name in ("max_seconds", "worker_cpus", "checkpoint_every"):
        value = getattr(config, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise DsacError(f"--{name} must be a positive number, got {value!r}")
    for name in ("env_step_ms", "env_reset_ms"):
        value = getattr(config, name)
        if isinstance(value, bool) or not (isinstance(value, int | float) and 0 <= value <= 60_000):
            raise DsacError(f"--{name} must be a number of milliseconds in [0, 60000], got {value!r}")
    for name in ("max_restarts", "env_restarts", "video_every"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise DsacError(f"--{name} must be an integer >= 0, got {value!r}")
    if config.learner_threads is not None and (
        isinstance(config.learner_threads, bool) or not isinstance(config.learner_threads, int) or config.learner_threads <= 0
    ):
        raise DsacError(f"--learner_threads must be a positive integer, got {config.learner_threads!r}")
    if config.learner_gpus is not None and not (math.isfinite(config.learner_gpus) and config.learner_gpus >= 0):
        raise DsacError(f"--learner_gpus must be >= 0, got {config.learner_gpus!r}")
    for name in ("priority_alpha", "priority_beta", "final_epsilon"):
        value = getattr(config, name)
        if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
            raise DsacError(f"--{name} must be in [0, 1], got {value!r}")
    if not (math.isfinite(config.epsilon_alpha) and config.epsilon_alpha >= 0):
        raise DsacError(f"--epsilon_alpha must be >= 0, got {config.epsilon_alpha!r}")
    from dsac.atari import AtariSettings

    AtariSettings.from_config(config).checked()


def check_relations(config: Config) -> None:
    """Flags that must agree with each other."""
    if not config.local and config.num_learners > config.num_workers:
        raise DsacError(
            f"--num_learners {config.num_learners} exceeds --num_workers {config.num_workers}: every learner "
            "samples replay shards of its own, and every shard needs a worker writing to it"
        )
    if not config.local and config.num_replay_shards > config.num_workers:
        raise DsacError(
            f"--num_replay_shards {config.num_replay_shards} exceeds --num_workers {config.num_workers}: "
            "every shard needs a worker writing to it"
        )
    if isinstance(config.seed, bool) or not isinstance(config.seed, int) or not 0 <= config.seed < 2**31:
        raise DsacError(f"--seed must be an integer in [0, 2^31), got {config.seed!r}")
    if config.target_entropy is not None and not math.isfinite(config.target_entropy):
        raise DsacError(f"--target_entropy must be a finite number, got {config.target_entropy!r}")
    if not (math.isfinite(config.v_min) and math.isfinite(config.v_max) and config.v_min < config.v_max):
        raise DsacError(f"--v_min {config.v_min!r} must be below --v_max {config.v_max!r}")
    if config.stop_return is not None and not math.isfinite(config.stop_return):
        raise DsacError(f"--stop_return must be a finite number, got {config.stop_return!r}")
    if not isinstance(config.env_kwargs, dict):
        raise DsacError(f"env_kwargs must be a dict, got {config.env_kwargs!r}")
    if not isinstance(config.custom_model_config, dict):
        raise DsacError("custom_model_config must be a dict")
    if config.fcnet_activation not in ACTIVATIONS:
        raise DsacError(f"fcnet_activation must be one of {', '.join(ACTIVATIONS)}, got {config.fcnet_activation!r}")
    if config.conv_activation not in ACTIVATIONS:
        raise DsacError(f"conv_activation must be one of {', '.join(ACTIVATIONS)}, got {config.conv_activation!r}")
    if config.conv_filters is not None:
        from dsac.models.vision import check_conv_filters

        check_conv_filters(config.conv_filters)
    if not config.fcnet_hiddens or any(h <= 0 for h in config.fcnet_hiddens):
        raise DsacError(f"--fcnet_hiddens must be positive layer sizes, got {config.fcnet_hiddens!r}")
    if config.num_replay_shards < config.num_learners:
        raise DsacError(
            f"--num_replay_shards {config.num_replay_shards} is fewer than --num_learners {config.num_learners}: "
            "every learner samples shards of its own"
        )
    if config.num_learners > 1:
        from dsac.policy import Policy
        from dsac.registry import policy_class_for

        policy = policy_class_for(config)
        if policy.compute_gradients is Policy.compute_gradients:
            raise DsacError(
                f"--num_learners {config.num_learners}: policy_class {policy.__name__} does not implement "
                "compute_gradients/apply_gradients"
            )
    if config.batch_size > config.buffer_size:
        raise DsacError(
            f"--batch_size {config.batch_size} is larger than the replay capacity "
            f"--buffer_size {config.buffer_size}"
        )
    if config.learning_starts > config.buffer_size:
        raise DsacError(
            f"--learning_starts {config.learning_starts} exceeds --buffer_size {config.buffer_size}"
        )


def check_named_code(config: Config) -> None:
    """Callbacks and policy classes named by the config are what they must be."""
    if config.callbacks is not None:
        from dsac.callbacks import Callbacks

        load_subclass(config.callbacks, Callbacks, "callbacks")
    if config.policy_class is not None:
        from dsac.policy import Policy

        load_subclass(config.policy_class, Policy, "policy_class")

"""The sections of a run's configuration, one dataclass per concern, each with its fields' defaults
and help text (``metadata["help"]``: the CLI, docs/guide.md and ``config.json`` describe the same
thing) and a ``check()`` of its own ranges. :class:`dsac.config.Config` composes them (with the
frames section, :class:`dsac.envs.atari.FrameSettings`) and checks what relates fields of different
sections.

Every field is a ``launch.py`` flag of the same name; a field whose default is ``None`` takes the
algorithm's default (or, where it says so, one computed when the config is resolved).

Values are read and range-checked by :mod:`dsac.settings.coercion`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dsac.errors import DsacError
from dsac.models.catalog import ACTIVATIONS
from dsac.models.sizes import check_widths
from dsac.settings import schedules
from dsac.settings.coercion import (
    SCHEDULED,
    at_most,
    in_half_open_unit_interval,
    in_unit_interval,
    json_list,
    json_object,
    non_negative_ints,
    optional_positive,
    positive_ints,
    positive_numbers,
)
from dsac.settings.registry import ALGOS

HER_STRATEGIES = ("future", "final", "episode")  # where --her's relabeled goals come from

# Batches per replay sample call where an algorithm sets none.
BATCHES_PER_SAMPLE = 16


def setting(default, help: str, **kw):
    """A section's field with help text (lists and dicts get a default factory). ``kw`` goes into
    its metadata: ``choices``, ``nargs``, ``cli_type`` (argparse's type), ``cli=False`` (no flag),
    ``old_names``."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


@dataclass(frozen=True)
class RunSettings:
    """What to train and when to stop: the algorithm, the env, the seed, the budgets, what to start from."""

    algo: str = setting("sac", "algorithm: sac or crossq (continuous actions), dqn (discrete actions)",
                        choices=ALGOS)
    env: str = setting("Pendulum-v1", "gymnasium environment id, or module:env-id / module:ClassName of your own")
    env_kwargs: dict = setting({}, 'keyword arguments of the env, as JSON: \'{"g": 9.81}\'', cli_type=json_object)
    flatten_obs: bool = setting(False, "flatten Dict/Tuple/Discrete/image observations into one flat Box")
    her: bool = setting(False, "hindsight relabeling of a goal-conditioned env in the rollout workers (docs/guide.md)")
    her_k: int = setting(4, "--her: relabeled copies stored per transition (0-64)")
    her_strategy: str = setting("future", "--her: a copy's goal is one achieved at this step or later (future), at "
                                "the episode's end (final), or anywhere in it (episode)", choices=HER_STRATEGIES)
    env_step_ms: float = setting(
        0.0, "rollout envs: each step takes at least this many milliseconds of wall time, sleeping, not computing "
        "(a stand-in for an expensive simulator, a robot or a remote service: benchmarks/scale.py)"
    )
    env_reset_ms: float = setting(
        0.0, "rollout envs: each reset takes at least this many milliseconds (as --env_step_ms)"
    )
    preset: str | None = setting(
        None, "settings by env from dsac/settings/presets.yaml, each with the record that chose it: by default "
        "--env's own (if it has one; flags given override it), none: off, or another env's id"
    )
    seed: int = setting(0, "random seed (envs, networks, replay sampling)")
    total_env_steps: int | None = setting(
        None, "stop after this many env steps, all workers together (algorithm default)"
    )
    stop_return: float | None = setting(None, "stop when the evaluation mean return reaches this")
    max_seconds: float | None = setting(None, "stop after this many wall-clock seconds")
    steps_per_iteration: int = setting(1_000, "env steps one Trainer.train() call collects")
    resume: str | None = setting(None, "continue the run in this directory from its checkpoint")
    init_weights: str | None = setting(
        None, "start acting from a weights.pkl dsac wrote (e.g. a best_weights.pkl), the target networks of what it "
        "holds copied from it; critics and optimizer start fresh"
    )
    trust_code: bool = setting(
        False, "import code that a file names: the env module, policy_class, callbacks or custom_model of an "
        "--init_weights file or of a run's config.json read by --resume or --config (values you type need no "
        "consent); never saved"
    )
    callbacks: object = setting(None, "a dsac.Callbacks subclass, or module:Class", cli_type=str)
    policy_class: object = setting(
        None, "a dsac.Policy subclass replacing the algorithm's, or module:Class", cli_type=str
    )

    def check(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**31:
            raise DsacError(f"--seed must be an integer in [0, 2^31), got {self.seed!r}")
        positive_ints(self, "total_env_steps", "steps_per_iteration")
        optional_positive(self, "max_seconds")
        if self.stop_return is not None and not math.isfinite(self.stop_return):
            raise DsacError(f"--stop_return must be a finite number, got {self.stop_return!r}")
        for name in ("env_step_ms", "env_reset_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, int | float) and 0 <= value <= 60_000):
                raise DsacError(f"--{name} must be a number of milliseconds in [0, 60000], got {value!r}")
        if not isinstance(self.env_kwargs, dict):
            raise DsacError(f"env_kwargs must be a dict, got {self.env_kwargs!r}")
        if isinstance(self.her_k, bool) or not isinstance(self.her_k, int) or not 0 <= self.her_k <= 64:
            raise DsacError(f"--her_k must be an integer in [0, 64], got {self.her_k!r}")
        if self.her_strategy not in HER_STRATEGIES:
            raise DsacError(f"--her_strategy must be one of {', '.join(HER_STRATEGIES)}, got {self.her_strategy!r}")


@dataclass(frozen=True)
class ResourceSettings:
    """Where a run's roles run: rollout workers, learners, replay shards, the cluster, restarts."""

    num_workers: int = setting(2, "rollout worker tasks (0: the serial runner, as --local)")
    local: bool = setting(
        False, "run rollout, replay, learner and evaluator in this one process without Ray (same classes, same "
        "files): for stepping through a custom env, model, policy or callback in a debugger, and tiny runs"
    )
    envs_per_worker: int = setting(1, "environments each rollout worker steps as one batch")
    num_learners: int = setting(1, "learner tasks; more than 1 train data-parallel (synchronous gradient averaging)")
    num_replay_shards: int | None = setting(
        None, "replay buffer actors; each worker writes to one, each learner samples its own (default: one per learner "
        "and at least one per 64 workers)"
    )
    address: str | None = setting(None, "Ray cluster to join (default: RAY_ADDRESS, else a local Ray)")
    worker_cpus: float | None = setting(None, "CPUs requested per rollout worker (default: fit the cluster)")
    learner_gpus: float | None = setting(None, "GPUs for the learner (default: 1 if the cluster has one, else 0)")
    learner_threads: int | None = setting(
        None, "TensorFlow threads of a learner (default: the CPUs it asks for; more threads than its own cores "
        "wait for cores the other roles hold)"
    )
    learner_xla: bool | None = setting(
        None, "compile the learner's update loop with XLA: more updates/s for small networks (~1.5x a 2x64 SAC on 17 "
        "observations, 1.4-2x CrossQ's batch-renormalized critics), ~7-10 s more at start (algorithm default: on "
        "for crossq, and for sac with flat observations and --total_env_steps of 100,000 or more; "
        "docs/benchmarks.md)"
    )
    max_restarts: int = setting(
        10, "times each role (rollout worker, learner, evaluator, replay shard, parameter server) is restarted "
        "after its process died (killed, out of memory, node lost) before the run stops"
    )
    stop_timeout: float = setting(
        30.0, "seconds a stop waits for the roles to end before it cancels them; an evaluator still playing (it "
        "says so every 2 s) is waited for while it plays, up to 30 min, so the final evaluation is kept"
    )
    env_restarts: int = setting(
        0, "times in the whole run an env that raised (in a rollout worker or the evaluator) is rebuilt, its broken "
        "episode dropped, before the next such error ends the run (0: the first one ends it)"
    )

    def check(self) -> None:
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise DsacError(f"--num_workers must be an integer >= 0, got {self.num_workers!r}")
        if self.local:
            self.check_local()
        positive_ints(self, "envs_per_worker", "num_learners", "num_replay_shards")
        at_most(self, envs_per_worker=4_096)
        optional_positive(self, "worker_cpus", "stop_timeout")
        non_negative_ints(self, "max_restarts", "env_restarts")
        if self.learner_threads is not None:
            positive_ints(self, "learner_threads")
        if self.learner_gpus is not None and not (math.isfinite(self.learner_gpus) and self.learner_gpus >= 0):
            raise DsacError(f"--learner_gpus must be >= 0, got {self.learner_gpus!r}")
        if self.num_replay_shards < self.num_learners:
            raise DsacError(
                f"--num_replay_shards {self.num_replay_shards} is fewer than --num_learners {self.num_learners}: "
                "every learner samples shards of its own"
            )
        if self.local:
            return
        for name in ("num_learners", "num_replay_shards"):
            if getattr(self, name) > self.num_workers:
                raise DsacError(
                    f"--{name} {getattr(self, name)} exceeds --num_workers {self.num_workers}: "
                    + ("every learner samples replay shards of its own, and every shard needs a worker writing to it"
                       if name == "num_learners" else "every shard needs a worker writing to it")
                )

    def check_local(self, workers_typed: bool = False) -> None:
        """The serial runner takes no flag that only means something with Ray, and steps one
        rollout worker's ``--envs_per_worker`` envs: a worker count above one, typed (the command
        line says) or not the default, asks for what it does not do."""
        for name, fine in (("num_learners", 1), ("num_replay_shards", 1), ("address", None),
                           ("worker_cpus", None), ("learner_gpus", None)):
            value = getattr(self, name)
            if value != fine:
                raise DsacError(f"--{name} {value} needs Ray: the serial runner (--local / --num_workers 0) runs one "
                                "learner and one replay buffer in this process")
        n = self.num_workers
        if n > 1 and (workers_typed or n != ResourceSettings.num_workers):
            raise DsacError(f"--num_workers {n} needs Ray: the serial runner (--local) steps one rollout worker's envs "
                            f"in this process; drop --local, or use --envs_per_worker {n} for {n} envs in this process")


@dataclass(frozen=True)
class AlgorithmSettings:
    """The learning algorithm's settings, SAC's and DQN's.

    This class holds what every algorithm takes; each algorithm's subclass, in
    ``dsac/algorithms/<name>/config.py``, adds its own (their help says whose). ``None`` is the
    algorithm's default (:attr:`dsac.algorithms.Algorithm.defaults`).
    """

    gamma: float = setting(0.99, "discount factor")
    lr: float | str | None = setting(None, "Adam learning rate of every network: a number or a schedule, "
                                "'linear(start, end[, fraction])' or rl-zoo's 'lin_<start>' (algorithm default)")
    batch_size: int | None = setting(None, "transitions per gradient update (algorithm default)")
    start_steps: int | None = setting(
        None, "uniform random actions for this many env steps, all workers together (algorithm default)"
    )
    learning_starts: int | None = setting(None, "env steps in replay before the first update (algorithm default)")
    updates_per_step: float | None = setting(
        None, "gradient updates per env step, enforced by the replay rate limiter (algorithm default)"
    )
    max_nonfinite_updates: int = setting(
        100, "updates in a row with a non-finite loss or gradient (each skipped) that stop the run"
    )

    def check(self) -> None:
        positive_ints(self, "batch_size", "max_nonfinite_updates")
        non_negative_ints(self, "start_steps", "learning_starts")
        for name in SCHEDULED:
            value = schedules.parse(name, getattr(self, name))
            ends = (value,) if isinstance(value, float) else (value.start, value.end)
            if not (math.isfinite(ends[0]) and ends[0] > 0 and all(math.isfinite(v) and v >= 0 for v in ends)):
                raise DsacError(f"--{name} must be a positive number (a schedule: start > 0, end >= 0), got {value}")
        positive_numbers(self, "updates_per_step")
        in_half_open_unit_interval(self, "gamma")


@dataclass(frozen=True)
class ModelSettings:
    """The networks: RLlib's model keys."""

    fcnet_hiddens: list[int] | None = setting(
        None, "hidden layer sizes of every built-in MLP, after the conv encoder for images (algorithm default)",
        nargs="+"
    )
    fcnet_activation: str = setting("relu", "activation of the built-in MLPs", choices=ACTIVATIONS)
    conv_filters: list | None = setting(
        None, "conv encoder of image observations, [[out_channels, kernel, stride], ...] as JSON (RLlib's model key; "
        "default: by frame size, the Nature DQN encoder for 84x84)", cli_type=json_list
    )
    conv_activation: str = setting("relu", "activation of the conv layers", choices=ACTIVATIONS)
    custom_model: str | None = setting(
        None, "a model registered with dsac.register_custom_model, or module:builder (replaces the MLPs)"
    )
    normalize_obs: bool = setting(
        False, "normalize vector observations by their running mean and variance (clipped at 10), statistics "
        "carried in the weights (rl-zoo's VecNormalize, RLlib's MeanStdFilter)"
    )
    custom_model_config: dict = setting({}, "keyword settings passed to the custom model builder", cli=False)
    custom_models: dict = setting(
        {}, "name -> builder of the custom_model the run uses; filled from the registry when the config is resolved",
        cli=False
    )

    def check(self) -> None:
        if not isinstance(self.custom_model_config, dict):
            raise DsacError("custom_model_config must be a dict")
        for name in ("fcnet_activation", "conv_activation"):
            if getattr(self, name) not in ACTIVATIONS:
                raise DsacError(f"{name} must be one of {', '.join(ACTIVATIONS)}, got {getattr(self, name)!r}")
        if self.conv_filters is not None:
            from dsac.models.vision import check_conv_filters

            check_conv_filters(self.conv_filters)
        check_widths("fcnet_hiddens", self.fcnet_hiddens)


@dataclass(frozen=True)
class ReplaySettings:
    """The replay buffer: capacity, n-step sums, prioritization."""

    buffer_size: int | None = setting(None, "replay capacity in transitions (algorithm default); with --her, in "
                                      "stored rows: 1 + her_k per env step")
    n_step: int | None = setting(None, "rewards summed per stored transition (algorithm default)")
    prioritized: bool | None = setting(None, "proportional prioritized replay (algorithm default: on for dqn)")
    priority_alpha: float = setting(0.6, "prioritization exponent alpha")
    priority_beta: float = setting(0.4, "initial importance-weight exponent beta, annealed to 1 over the run")

    def check(self) -> None:
        positive_ints(self, "buffer_size", "n_step")
        at_most(self, n_step=1_000)
        in_unit_interval(self, "priority_alpha", "priority_beta")


@dataclass(frozen=True)
class FlowSettings:
    """How data moves between the roles: chunks from rollout workers, sample calls, weight pushes."""

    max_steps_ahead: int = setting(128, "env steps collection may run ahead of the update ratio")
    # Many batches per sample call and a push every 20 updates: the replay actor's cost is per
    # call, not per batch, and so is the learner's per update loop, so fewer, larger calls
    # (docs/benchmarks.md).
    batches_per_sample: int | None = setting(
        None, "batches one replay sample call returns (algorithm default; sac 32 in runs of 100,000 env steps or more: "
        "fewer, larger calls cost the replay and the learner's update loop less per update)"
    )
    prefetch: int = setting(2, "replay sample calls the learner keeps in flight")
    push_every: int = setting(
        20, "learner pushes weights every this many updates (after the sample call's batches that pass it)"
    )
    push_interval: float = setting(
        0.1, "least seconds between two weight pushes of a learner: a push due sooner waits for the next block of "
        "updates after it (rollout workers take new weights between chunks, every --chunk_seconds; 0: every "
        "--push_every updates)"
    )
    chunk_seconds: float = setting(0.1, "a rollout worker sends what it gathered this often, or once it holds 128 "
                                    "transitions if that takes longer (at most 1 s)")
    max_chunk: int = setting(1024, "most transitions in one replay add call")

    def check(self) -> None:
        positive_ints(self, "max_steps_ahead", "batches_per_sample", "prefetch", "push_every", "max_chunk")
        at_most(self, batches_per_sample=1_024, prefetch=64)
        positive_numbers(self, "chunk_seconds")
        if not (isinstance(self.push_interval, int | float) and 0.0 <= self.push_interval <= 60.0):
            raise DsacError(f"--push_interval must be in [0, 60] seconds, got {self.push_interval!r}")


@dataclass(frozen=True)
class OutputSettings:
    """Evaluation, the run directory and what is written into it, the console, trackers."""

    eval_every: int | None = setting(
        None, "evaluate every this many env steps (algorithm default; sac and crossq 10,000 in runs of 100,000 "
        "env steps or more, as SB3 and rl-zoo evaluate)")
    eval_episodes: int | None = setting(None, "deterministic episodes per evaluation (algorithm default)")
    eval_cpu_share: float = setting(
        0.1, "most of the run's CPUs (their number x the wall time) evaluations during training may use: one that "
        "is due waits while they have used more, then evaluates the weights of then (0: every --eval_every; the "
        "final evaluation always runs)"
    )
    video_every: int = setting(0, "record episode 0 of every this-many-th evaluation, and of the final one, as "
                             "<output_dir>/videos/<env_steps>.mp4, the best of them as videos/best.mp4 (0: off)")
    output_dir: str | None = setting(
        None, "run directory (default: <storage_path>/<algo>-<env>-<timestamp>)"
    )
    storage_path: str | None = setting(
        None, "where run directories go: a path every node can reach (NFS) on a cluster (default: runs/, "
        "or ~/dsac_runs inside a Ray job)"
    )
    log_every: float = setting(10.0, "seconds between progress lines when stdout is not a terminal")
    progress_bar: bool = setting(
        True, "a live progress bar when stdout is a terminal (else a line every --log_every s)"
    )
    tensorboard: bool = setting(True, "write TensorBoard event files to <output_dir>/tb")
    wandb: str | None = setting(
        None, "also log the config, each progress row, the videos and the final weights to this Weights & Biases "
        "project (pip install -e \".[wandb]\"; WANDB_MODE=offline: files only)"
    )
    mlflow: str | None = setting(
        None, "also log them to this MLflow tracking URI (http://host:5000, sqlite:///runs.db, a directory; pip "
        "install -e \".[mlflow]\"; experiment: MLFLOW_EXPERIMENT_NAME, else dsac)"
    )
    checkpoint_every: float | None = setting(
        30.0, "seconds between checkpoints of the full training state (networks, optimizer, targets, entropy "
        "coefficient, counters) into <output_dir>/checkpoint; a restarted learner or parameter server resumes from "
        "the latest (one is always written at the end; old name: --snapshot_every)", old_names=("snapshot_every",)
    )
    checkpoint_replay: bool = setting(False, "include the replay buffer's contents in checkpoints (compressed .npz)")
    verbose: bool = setting(False, "show TensorFlow's own start-up and log output, and Ray's own paragraphs about dead "
                              "workers (hidden by default: dsac says in one line what died)")

    def check(self) -> None:
        positive_ints(self, "eval_every", "eval_episodes")
        at_most(self, eval_episodes=100_000)
        if not (isinstance(self.eval_cpu_share, int | float) and 0.0 <= self.eval_cpu_share <= 1.0):
            raise DsacError(f"--eval_cpu_share must be in [0, 1], got {self.eval_cpu_share!r}")
        non_negative_ints(self, "video_every")
        positive_numbers(self, "log_every")
        optional_positive(self, "checkpoint_every")

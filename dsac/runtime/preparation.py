"""What a run checks and learns before anything starts — the config, the env and its
spaces, the replay's memory, the output directory, warm-start weights and a resumed
checkpoint — shared by the distributed run and the serial runner. Free of Ray: a typo costs
about a second, not a cluster start-up.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import numpy as np

from dsac.config import Config
from dsac.envs.atari import is_atari_id, is_large_frame
from dsac.envs.make import check_training_env_kwargs, describe_space, make_env, one_line
from dsac.errors import DsacError
from dsac.formats.checkpoints import read_checkpoint
from dsac.formats.files import (
    available_memory,
    check_run_dir,
    check_writable_dir,
    code_names,
    load_weights,
)
from dsac.models.sizes import check_network_size
from dsac.models.vision import conv_output_shape, is_large_image, obs_input
from dsac.output.recorder import network_keys
from dsac.output.trackers import check_trackers
from dsac.policy import check_policy_weights
from dsac.replay.buffer import check_fits_in_memory, replay_specs, storage_bytes
from dsac.runtime import build
from dsac.settings.coercion import flags_as_typed
from dsac.settings.registry import algorithm, refuse_untrusted_code

log = logging.getLogger("dsac")


@dataclass
class Prepared:
    """What :func:`prepare` learned without starting Ray."""

    config: Config
    observation_space: object
    action_space: object
    output_dir: str
    created_output_dir: bool
    initial_weights: dict | None = None


def in_ray_job() -> bool:
    """Whether this driver is the entrypoint of a ``ray job submit``."""
    return "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ


def default_output_dir(config: Config) -> str:
    """``<storage_path>/<algo>-<env>-<timestamp>``. Inside a Ray job without a storage path
    the runs go to ``~/dsac_runs`` on the driver's node, not into the job's working directory
    (a temporary copy Ray may delete)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run = config.run
    root = config.output.storage_path or (os.path.expanduser("~/dsac_runs") if in_ray_job() else "runs")
    name = f"{run.algo}-{run.env.replace('/', '_').replace(':', '_')}-{stamp}"
    return os.path.join(root, name)


def prepare(config: Config, local: bool = False) -> Prepared:
    """Check the user's settings (:meth:`Config.validate`: types, algorithm defaults, ranges),
    build the env once for its spaces, resolve the config for them (:func:`resolve_for_spaces`),
    then check what the run would start with: warm-start weights and the output directory. For
    a run on a local Ray (not ``local``: the serial runner starts none), its roles must fit the
    Ray it will start."""
    config = config.validate()
    run = config.run
    check_training_env_kwargs(run.env_kwargs)
    check_trackers(config.output)
    if not local and not (config.resources.address or os.environ.get("RAY_ADDRESS")):
        check_local_ray_fits(config)
    observation_space, action_space = env_spaces(config)
    config = resolve_for_spaces(config, observation_space, action_space)
    say_budget(config)
    initial_weights = None
    if run.init_weights:
        initial_weights = fitting_weights(config, run.init_weights, observation_space, action_space)
    output_dir, created = checked_output_dir(config)
    return Prepared(config, observation_space, action_space, output_dir, created, initial_weights)


def check_local_ray_fits(config: Config) -> None:
    """The run's roles fit the local Ray it will start (its size is known before it starts)."""
    import ray

    from dsac.distributed.topology import local_cluster_resources, plan_resources

    if not ray.is_initialized():
        plan_resources(config.resources, config.flow, local_cluster_resources())


def env_spaces(config: Config) -> tuple:
    """The observation and action spaces of the run's env (built, reset once and closed), which
    its algorithm must take; one log line when its frames are preprocessed."""
    run = config.run
    env = make_env(run.env, run.env_kwargs, run.flatten_obs, config.frames, goal=run.her)
    try:
        env.reset(seed=run.seed)
    except Exception as exc:  # the env's own reset raised
        raise DsacError(f"environment '{run.env}' failed to reset: {one_line(exc)}") from None
    finally:
        env.close()
    say_image_preprocessing(config, env)
    algorithm(run.algo).check_spaces(run.env, env.observation_space, env.action_space)
    return env.observation_space, env.action_space


def resolve_for_spaces(config: Config, observation_space, action_space, available: int | None = None) -> Config:
    """The second half of resolving a config, the one that needs the env's spaces (the first,
    :meth:`Config.validate`, needs none): for large images, the algorithm's image defaults of
    the fields no flag set, and a default replay capacity that fits in memory; checked once
    more if that changed it. The conv encoder must fit the frames and the replay this machine's
    memory (``available`` bytes: what is free now).

    Raises:
        DsacError: one line, before anything starts.
    """
    available = available_memory() if available is None else available
    obs = obs_input(observation_space)
    fills = image_fills(config, obs.shape) if obs.is_image else {}
    resolved = config.replace(**fills) if fills else config
    specs, frames = replay_specs(observation_space, action_space)
    if frames is not None and "buffer_size" in resolved.defaulted:
        fills.update(buffer_fills(resolved, specs, frames, available))
    if fills:
        resolved = config.replace(**fills).check()
    if obs.is_image:  # every conv layer must fit its input: one line now, not a learner's traceback later
        conv_output_shape(obs.shape, resolved.model.conv_filters)
    # before a network of that size is built
    check_network_size(resolved.model, resolved.algorithm, observation_space, action_space)
    check_fits_in_memory(storage_bytes(resolved.replay.buffer_size, specs, frames), available, "this machine")
    check_sample_call(resolved, specs, obs, available)
    return resolved


def check_sample_call(config: Config, specs: dict, obs, available: int) -> None:
    """Refuse a replay sample call (``--batch_size`` × ``--batches_per_sample`` transitions,
    observations whole) that would take more than a quarter of the memory available (the
    replay, Ray's copy and the learner each hold it), and a distributional update as large."""
    per_item = sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for shape, dtype in specs.values())
    per_item += 2 * int(np.prod(obs.shape, dtype=np.int64)) * np.dtype(obs.dtype).itemsize  # obs, next_obs
    batch, calls = config.algorithm.batch_size, config.flow.batches_per_sample
    if batch * calls * per_item > available / 4:
        raise DsacError(f"one replay sample call of --batch_size {batch:,} × --batches_per_sample {calls} needs "
                        f"{batch * calls * per_item / 2**30:.2f} GiB, more than a quarter of the "
                        f"{available / 2**30:.2f} GiB available: lower them")
    # C51's projection weighs every atom against every atom for each transition: B × N × N
    # float32, and the gradient tape keeps a few such arrays.
    atoms = int(getattr(config.algorithm, "num_atoms", 1) or 1)
    if atoms > 1 and 3 * 4 * batch * atoms * atoms > available / 4:
        raise DsacError(f"the distributional update of --batch_size {batch:,} with --num_atoms {atoms:,} needs "
                        f"{3 * 4 * batch * atoms * atoms / 2**30:.2f} GiB, more than a quarter of the "
                        f"{available / 2**30:.2f} GiB available: lower them")


def checked_output_dir(config: Config) -> tuple[str, bool]:
    """The run's directory (``--resume``'s, ``--output_dir`` or a new one) and whether it is yet
    to be made; refused when it cannot be written, holds a symlink dsac would follow, or holds
    another run."""
    resume = config.run.resume
    output_dir = resume or config.output.output_dir or default_output_dir(config)
    created = not os.path.exists(output_dir)
    check_writable_dir(output_dir, "--output_dir")
    check_run_dir(output_dir, "--resume" if resume else "--output_dir")
    if not resume and os.path.exists(os.path.join(output_dir, "progress.jsonl")):
        raise DsacError(f"--output_dir {output_dir} already holds a run: choose another directory")
    return output_dir, created


def say_image_preprocessing(config: Config, env) -> None:
    """One log line when a non-ALE env's frames are preprocessed (:func:`dsac.envs.atari.wrap_image`)."""
    raw, run, frames = env.unwrapped.observation_space, config.run, config.frames
    if raw == env.observation_space or not is_large_frame(raw) or is_atari_id(run.env):
        return
    log.info("%s's %s frames are preprocessed as ALE's: %s (--preprocess_images false for the raw frames)",
             run.env, "x".join(map(str, raw.shape)),
             f"{frames.dim}x{frames.dim}, {'gray' if frames.grayscale else 'colour'}, {frames.framestack} stacked "
             f"-> observations {'x'.join(map(str, env.observation_space.shape))}")


def say_budget(config: Config) -> None:
    """A warning when ``--max_seconds`` comes with the algorithm's default env-step budget for
    small vector envs, which may end the run long before the seconds do (SAC's 20,000 steps:
    ~1 minute of HalfCheetah on 2 cores); Atari's and large images' budgets are not meant."""
    run = config.run
    vector_default = algorithm(run.algo).defaults.get("total_env_steps")
    if run.max_seconds and "total_env_steps" in config.defaulted and run.total_env_steps == vector_default:
        log.warning("--max_seconds %g with %s's default budget of %s env steps: the run stops at whichever comes "
                    "first (--total_env_steps to raise the budget)", run.max_seconds, run.algo,
                    f"{run.total_env_steps:,}")


def image_fills(config: Config, shape) -> dict:
    """Large image observations (not an ALE game, which has its own defaults): the algorithm's
    ``image_defaults`` for the fields no flag set, said in the log."""
    run = config.run
    spec = algorithm(run.algo)
    if not spec.image_defaults or not is_large_image(shape) or is_atari_id(run.env):
        return {}
    fills = {key: value for key, value in spec.image_defaults.items() if key in config.defaulted}
    if fills:
        log.info("image observations %s: %s's defaults for large images %s (flags override them)",
                 "x".join(map(str, shape)), run.algo,
                 flags_as_typed(fills))
    return fills


# Share of the available memory a default-sized replay of images may take.
IMAGE_REPLAY_MEMORY_SHARE = 0.5


def buffer_fills(config: Config, specs: dict, frames, available: int) -> dict:
    """With image observations and no --buffer_size, the replay's capacity follows from the
    frames' size and the memory available: the algorithm's default if it fits in half of
    it (no fills), else what does (said in the log), and warm-up no longer than it."""
    buffer_size, algorithm_section = config.replay.buffer_size, config.algorithm
    per_transition = storage_bytes(10_000, specs, frames) / 10_000
    fits = int(IMAGE_REPLAY_MEMORY_SHARE * available / per_transition) // 1000 * 1000
    if fits >= buffer_size:
        return {}
    capacity = max(fits, algorithm_section.batch_size, 1000)
    log.info("replay buffer: the default %d transitions of %s frames would need %.1f GiB; %d transitions fit in "
             "half of the %.1f GiB available (set --buffer_size to choose)", buffer_size,
             "x".join(map(str, frames.frame_shape)), storage_bytes(buffer_size, specs, frames) / 2**30,
             capacity, available / 2**30)
    return {"buffer_size": capacity, "learning_starts": min(algorithm_section.learning_starts, capacity)}


def image_buffer_size(config: Config, specs: dict, frames, available: int) -> Config:
    """``config`` with the replay capacity of :func:`buffer_fills`."""
    return config.replace(**buffer_fills(config, specs, frames, available))


def fitting_weights(config: Config, path: str, observation_space, action_space) -> dict:
    """The weights in ``path``, if they fit this run's algorithm, spaces and network: every
    array's name, shape, dtype and values are checked against the policy the config builds."""
    payload = load_weights(path)
    model = payload.get("model") or {}
    run, values = config.run, config.to_dict()  # flat: as the weights file names its settings
    if not run.trust_code:
        typed = {key: values[key] for key in ("env", "policy_class", "custom_model")}
        refuse_untrusted_code(code_names(payload), f"--init_weights {path}", typed)
    if payload.get("algo") != run.algo:
        raise DsacError(f"--init_weights {path} holds {payload.get('algo')!r} weights, this run is --algo {run.algo}")
    for name, space in (("observation", observation_space), ("action", action_space)):
        if payload.get(f"{name}_space") != describe_space(space):
            raise DsacError(
                f"--init_weights {path} was trained on {payload.get('env')!r} whose {name} space differs from "
                f"{run.env}'s"
            )
    for key in network_keys(config):
        ours = values[key]
        ours = list(ours) if isinstance(ours, tuple | list) else ours
        if key in model and model[key] != ours:
            raise DsacError(f"--init_weights {path} has {key} {model[key]!r}, this run {ours!r}: pass --{key} to match")
    policy = build.acting_policy(config, observation_space, action_space, 0)
    try:
        check_policy_weights(policy, payload["weights"])
    except ValueError as exc:
        raise DsacError(f"--init_weights {path}: {exc}") from None
    return payload["weights"]


def check_resume_state(prepared: Prepared, state: dict, run_dir: str) -> None:
    """Refuse a checkpoint whose state does not fit the run before Ray starts: non-finite
    values, or acting weights of other names or shapes than the config's network."""
    for name, array in state.items():
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            raise DsacError(f"--resume {run_dir}: checkpoint/state.npz holds NaN or infinite values in {name}")
    policy = build.acting_policy(prepared.config, prepared.observation_space, prepared.action_space, 0)
    shapes = policy.weight_shapes() or {}
    try:
        check_policy_weights(policy, {name: state[name] for name in shapes if name in state} if shapes else {})
    except ValueError as exc:
        raise DsacError(f"--resume {run_dir}: checkpoint/state.npz does not fit the run's network: {exc}") from None


def resume_config(run_dir: str, overrides: dict, label: str = "--resume") -> Config:
    """The config a run in ``run_dir`` was started with, changed by ``overrides`` (``--resume``
    continues in ``run_dir``; ``Trainer.restore``, the ``label`` of its errors, in a new directory
    by default). The saved config is a run's record, read as data
    (:func:`dsac.settings.records.record_values`): code it names (an env module, callbacks,
    policy class, custom model) is imported only with ``trust_code`` among the overrides, or when
    typed again among them; where it connects, sends or reads and writes outside ``run_dir``
    comes from the overrides only. A directory where a name dsac reads or writes is a symlink is
    refused first (:func:`dsac.formats.files.check_run_dir`)."""
    if not os.path.isdir(run_dir):
        raise DsacError(f"{label} {run_dir}: no such directory")
    check_run_dir(run_dir, label)
    path = os.path.join(run_dir, "config.json")
    if not os.path.exists(path):
        raise DsacError(f"{label} {run_dir}: not a dsac run (no config.json)")
    continues = {"resume": run_dir, "output_dir": run_dir} if label == "--resume" else {}
    return Config.load(path, {**overrides, **continues}, source=f"{label} {run_dir}: config.json")


def resume_checkpoint(config: Config, started_at: float) -> tuple[dict | None, float]:
    """The checkpoint ``--resume`` continues from (None without ``--resume``), and the start
    time that makes ``wall_s`` carry on from it."""
    run = config.run
    if not run.resume:
        return None, started_at
    checkpoint = read_checkpoint(run.resume)
    done = checkpoint["meta"]["env_steps"]
    if done >= run.total_env_steps:
        raise DsacError(
            f"--resume {run.resume}: the run already has {done} env steps; "
            f"raise --total_env_steps above {done} to continue it"
        )
    return checkpoint, time.time() - checkpoint["meta"].get("wall_s", 0.0)


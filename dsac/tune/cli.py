"""``dsac-tune`` / ``python -m dsac.tune``: a hyperparameter search of dsac trials with Ray Tune.

    python -m dsac.tune --space space.yaml --scheduler asha --num_samples 8 --max_seconds 300

Prints Tune's table of trials while it runs and, at the end, the best trial's flags as a YAML
file that ``launch.py --config`` takes and its weights; the last two lines are
``best config: PATH`` and ``best weights: PATH``. Bad input: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from types import SimpleNamespace

from dsac.errors import DsacError, OneLineParser, quiet_when_the_reader_leaves
from dsac.settings.coercion import non_negative_ints, optional_positive, positive_ints, positive_numbers
from dsac.tune.trainable import METRIC

log = logging.getLogger("dsac")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser("dsac-tune", prog="dsac-tune", description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", required=True, help="a .yaml or .json file: flag -> value or "
                        "{grid|choice|uniform|loguniform: ...}")
    parser.add_argument("--num_samples", type=int, default=1, help="samples of the space (each grid point this often)")
    parser.add_argument("--scheduler", choices=("fifo", "asha", "pbt"), default="fifo")
    parser.add_argument("--time_attr", default="training_iteration",
                        choices=("training_iteration", "time_total_s", "timesteps_total"),
                        help="what ASHA's rungs and PBT's perturbation interval count: iterations, a "
                        "trial's seconds or its env steps")
    parser.add_argument("--grace_period", type=float, default=2,
                        help="ASHA: a trial's first rung, in --time_attr units")
    parser.add_argument("--reduction_factor", type=float, default=2,
                        help="ASHA: 1 in this many trials goes on at each rung")
    parser.add_argument("--perturbation_interval", type=float, default=2,
                        help="PBT: --time_attr units between exploits")
    parser.add_argument("--metric", default=METRIC, help="the result key maximized")
    parser.add_argument("--max_seconds", type=float, help="each trial's wall-clock budget")
    parser.add_argument("--total_env_steps", type=int, help="each trial's env-step budget")
    parser.add_argument("--max_concurrent", type=int, default=0, help="trials at once (0: as many as fit)")
    parser.add_argument("--storage_path", default=os.path.abspath("tune_results"),
                        help="where Tune writes results, checkpoints and each trial's dsac output")
    parser.add_argument("--name", default="dsac_tune", help="the experiment's directory under --storage_path")
    parser.add_argument("--address", help="a Ray cluster's address (default: a local Ray)")
    parser.add_argument("--num_cpus", type=float, help="logical CPUs of the local Ray (default: the machine's); "
                        "distributed trials are sized in whole CPUs per role, more than a laptop has")
    parser.add_argument("--wandb", metavar="PROJECT", help="log every trial to this Weights & Biases project "
                        "(Tune's WandbLoggerCallback; WANDB_MODE=offline: files only)")
    parser.add_argument("--mlflow", metavar="URI", help="log every trial as a run of this MLflow tracking URI "
                        "(Tune's MLflowLoggerCallback; experiment: MLFLOW_EXPERIMENT_NAME, else dsac)")
    parser.add_argument("--trust_code", action="store_true", help="a run's config.json given as --space may import "
                        "the modules it names (env module:Name, callbacks, policy class, custom model)")
    return parser


def ending_only_started(callback_class, started: str):
    """``callback_class`` ending only trials it started (its ``started`` dict holds them): Ray
    2.60's W&B and MLflow logger callbacks raise KeyError ending a trial that failed in setup
    (a flag dsac refuses) before logging anything, and that error ends the whole experiment."""

    class Callback(callback_class):
        def log_trial_end(self, trial, failed: bool = False):
            if trial in getattr(self, started):
                super().log_trial_end(trial, failed)

    Callback.__name__ = callback_class.__name__
    return Callback


def tracker_callbacks(wandb_project: str | None, mlflow_uri: str | None) -> list:
    """Tune's logger callbacks for ``--wandb``/``--mlflow`` (checked first as a lone run's are:
    :func:`dsac.output.trackers.check_trackers`); every trial is one tracker run, logged from the driver."""
    from dsac.output.trackers import check_trackers, mlflow_client_uri, mlflow_defaults, mlflow_experiment

    check_trackers(SimpleNamespace(wandb=wandb_project, mlflow=mlflow_uri))
    callbacks = []
    if mlflow_uri:
        import mlflow
        from ray.air.integrations.mlflow import MLflowLoggerCallback

        mlflow_defaults()
        mlflow_uri = mlflow_client_uri(mlflow_uri)  # its user and password as MLflow's env variables
        name, _ = mlflow_experiment(mlflow.MlflowClient(tracking_uri=mlflow_uri), mlflow_uri)
        callbacks.append(ending_only_started(MLflowLoggerCallback, "_trial_runs")(tracking_uri=mlflow_uri,
                                                                                  experiment_name=name))
    if wandb_project:
        from ray.air.integrations.wandb import WandbLoggerCallback

        callbacks.append(ending_only_started(WandbLoggerCallback, "_trial_queues")(project=wandb_project))
    return callbacks


# ASHA's last rung where the space fixes no budget in --time_attr's unit: no hidden cap (Tune's
# default is 100).
ASHA_MAX_T = 10**12


def check_scheduler_options(grace_period, reduction_factor, perturbation_interval) -> None:
    """The schedulers' numbers (:func:`dsac.settings.coercion`'s checks): ``grace_period`` and
    ``perturbation_interval`` finite and positive, ``reduction_factor`` finite and above 1."""
    options = SimpleNamespace(grace_period=grace_period, perturbation_interval=perturbation_interval,
                              reduction_factor=reduction_factor)
    positive_numbers(options, "grace_period", "perturbation_interval", "reduction_factor")
    if not reduction_factor > 1:
        raise DsacError(f"--reduction_factor must be a number above 1 (1 in this many trials goes on), "
                        f"got {reduction_factor!r}")


def check_options(args) -> None:
    """dsac-tune's own flags, before anything is read or started: one line for a bad one."""
    positive_ints(args, "num_samples")
    non_negative_ints(args, "max_concurrent")
    optional_positive(args, "num_cpus", "max_seconds")
    if args.total_env_steps is not None:
        positive_ints(args, "total_env_steps")
    check_scheduler_options(args.grace_period, args.reduction_factor, args.perturbation_interval)
    if args.num_cpus is not None and args.address:
        raise DsacError("--num_cpus sizes a local Ray, not the cluster at --address: drop one of them")


def scheduler_for(name: str, space: dict, time_attr: str = "training_iteration", grace_period: float = 2,
                  reduction_factor: float = 2, perturbation_interval: float = 2):
    """Tune's scheduler ``name`` (``fifo``: None) over ``space``, counting ``time_attr`` (its
    numbers as :func:`check_options` checked them). ASHA's last rung is the trials' own budget in
    that unit where the space fixes it (``max_seconds`` for ``time_total_s``,
    ``total_env_steps`` for ``timesteps_total``)."""
    from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining

    from dsac.tune.space import mutations

    if name == "asha":
        budget = {"time_total_s": "max_seconds", "timesteps_total": "total_env_steps"}.get(time_attr)
        kind, value = space.get(budget, ("grid", None))
        max_t = value if kind is None and value else ASHA_MAX_T
        if grace_period >= max_t:
            named = budget if kind is None and value else f"dsac-tune's last rung in {time_attr}"
            raise DsacError(f"--grace_period {grace_period:g} is not below the trials' budget {max_t:g} ({named})")
        return ASHAScheduler(time_attr=time_attr, grace_period=grace_period, reduction_factor=reduction_factor,
                             max_t=max_t)
    if name == "pbt":
        if not mutations(space):
            raise DsacError("--scheduler pbt needs at least one choice/uniform/loguniform entry in --space to mutate")
        # Synchronous: every trial reaches the perturbation point before the lower ones clone
        # the upper ones' checkpoints (asynchronous PBT skips an exploit whose donor has not
        # saved at its own point yet, which on a small population is most of them).
        return PopulationBasedTraining(time_attr=time_attr, perturbation_interval=perturbation_interval,
                                       hyperparam_mutations=mutations(space), synch=True)
    return None


def run(args) -> tuple[str, str]:
    """The search; returns the best config file's path and the best weights' path."""
    from dsac.config import Config
    from dsac.distributed.cluster import connect_ray
    from dsac.formats.files import check_writable_dir
    from dsac.formats.redaction import redact_text
    from dsac.tune.space import first_values, read_space

    check_options(args)
    budget = {k: v for k, v in (("max_seconds", args.max_seconds), ("total_env_steps", args.total_env_steps))
              if v is not None}
    space = read_space(args.space, budget, trust_code=args.trust_code)
    warn_default_step_budget(space)
    scheduler = scheduler_for(args.scheduler, space, args.time_attr, args.grace_period, args.reduction_factor,
                              args.perturbation_interval)  # bad options: before Ray starts
    try:
        check_writable_dir(args.storage_path, "--storage_path")
    except DsacError as exc:  # a cloud store's URI may carry a token
        raise DsacError(redact_text(str(exc), args.storage_path)) from None
    callbacks = tracker_callbacks(args.wandb, args.mlflow)
    address = args.address or os.environ.get("RAY_ADDRESS")
    if not address:  # a local Ray: its size is known before it starts
        trial_fits(space, {"CPU": args.num_cpus or os.cpu_count() or 1})  # its GPUs: once it runs
    # As a lone run joins or starts Ray: dsac and the user's env module reach every worker, and
    # a local Ray that does not come up is started again or named in one line.
    connect_ray(address, Config.from_dict(first_values(space)).run.env, verbose=True, num_cpus=args.num_cpus)
    results = search(space, scheduler=scheduler, metric=args.metric, num_samples=args.num_samples,
                     storage_path=args.storage_path, name=args.name, max_concurrent=args.max_concurrent,
                     callbacks=callbacks)
    return write_best(results, args.metric, os.path.join(os.path.abspath(args.storage_path), args.name))


def warn_default_step_budget(space: dict) -> None:
    """A time budget without a step budget: say that the algorithm's default step budget also
    stops each trial (as it stops a ``launch.py --max_seconds`` run)."""
    from dsac.config import Config
    from dsac.tune.space import first_values

    if "max_seconds" in space and "total_env_steps" not in space:
        steps = Config.from_dict(first_values(space)).validate().run.total_env_steps
        log.warning("dsac-tune: each trial stops at max_seconds or at the algorithm's default total_env_steps "
                    "(%d env steps), whichever comes first: set total_env_steps to lift it", steps)


def search(space: dict, *, storage_path: str, name: str, scheduler=None, metric: str = METRIC,
           num_samples: int = 1, max_concurrent: int = 0, verbose: int = 1, callbacks: list | None = None):
    """A Tune experiment of dsac trials over ``space`` (:func:`dsac.tune.space.parse_space`'s
    form) on the Ray this process is connected to; returns Tune's ``ResultGrid``. A failed
    trial is one warning line with dsac's message; the others go on.

    :param space: ``{flag: (kind, argument)}``, kind None for a fixed value.
    :param storage_path: where Tune writes results, checkpoints and each trial's dsac output.
    :param name: the experiment's directory under ``storage_path``.
    :param scheduler: a Tune scheduler (:func:`scheduler_for`), None for first in, first out.
    :param metric: the result key maximized.
    :param num_samples: samples of the space (each grid point this often).
    :param max_concurrent: trials at once (0: as many as fit).
    :param verbose: Tune's reporter (0: silent, 1: the table of trials).
    :param callbacks: Tune callbacks, e.g. :func:`tracker_callbacks`'s.
    """
    import ray
    from ray import tune

    from dsac.tune.space import tune_space
    from dsac.tune.trainable import DsacTrainable

    log_concurrency(space, {"GPU": 0.0, **ray.cluster_resources()}, max_concurrent)
    tuner = tune.Tuner(
        DsacTrainable, param_space=tune_space(space),
        tune_config=tune.TuneConfig(metric=metric, mode="max", num_samples=num_samples,
                                    scheduler=scheduler,
                                    max_concurrent_trials=max_concurrent or None),
        run_config=tune.RunConfig(name=name, storage_path=os.path.abspath(storage_path), verbose=verbose,
                                  callbacks=callbacks,
                                  checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True, num_to_keep=2)),
    )
    results = tuner.fit()
    for result in results:
        if result.error is not None:
            line = str(result.error).strip().splitlines()[-1].removeprefix("dsac.errors.DsacError: ")
            log.warning("trial %s failed: %s", os.path.basename(result.path), line)
    return results


def write_best(results, metric: str, experiment_dir: str) -> tuple[str, str]:
    """The best trial's flags as ``best_config.yaml`` in ``experiment_dir`` (a file
    ``launch.py --config`` takes); returns its path and the best trial's weights' path."""
    from dsac.formats.files import atomic_write_bytes

    try:
        best = results.get_best_result(metric=metric, mode="max", scope="last")
    except RuntimeError:
        raise DsacError(f"no trial reported {metric}: every trial failed") from None
    config_path = os.path.join(experiment_dir, "best_config.yaml")
    atomic_write_bytes(config_path, best_config_text(dict(best.config)).encode())
    weights = os.path.join(best.metrics.get("dsac_output_dir") or os.path.join(best.path, "dsac"), "weights.pkl")
    return config_path, os.path.abspath(weights)


def best_config_text(flags: dict) -> str:
    """``best_config.yaml``'s text: the trial's flags, every URI's credentials hidden
    (:func:`dsac.formats.redaction.redact_value`) and a comment naming the flags to type again."""
    import yaml

    from dsac.formats.redaction import redact_value

    shown = redact_value(flags)
    hidden = sorted(key for key in flags if shown[key] != flags[key])
    head = "".join(f"# {key}: its credentials are hidden (***); type --{key} to give them\n" for key in hidden)
    return head + yaml.safe_dump(shown, sort_keys=True)


def trial_fits(space: dict, cluster: dict) -> tuple[int, float, float, int]:
    """What one trial asks for (its first values' bundles: how many, CPUs, GPUs) and how many
    trials fit in ``cluster``; a trial larger than the cluster is an error (it would wait for
    ever), not a wait."""
    from dsac.tune.space import first_values
    from dsac.tune.trainable import resource_bundles

    bundles = resource_bundles(first_values(space))
    cpus, gpus = sum(b.get("CPU", 0) for b in bundles), sum(b.get("GPU", 0) for b in bundles)
    fit = int(cluster.get("CPU", 0) // cpus) if cpus else 0
    if gpus and "GPU" in cluster:
        fit = min(fit, int(cluster["GPU"] // gpus))
    if fit == 0:
        has = f"{cluster.get('CPU', 0):g} CPUs" + (f" / {cluster['GPU']:g} GPUs" if "GPU" in cluster else "")
        raise DsacError(f"one trial asks for {cpus:g} CPUs{f' and {gpus:g} GPUs' if gpus else ''}, more than the "
                        f"cluster has ({has}): lower num_workers or worker_cpus in the space, set local: true, or "
                        "give a local Ray --num_cpus")
    return len(bundles), cpus, gpus, fit


def log_concurrency(space: dict, cluster: dict, max_concurrent: int) -> None:
    """Say how many trials run at once and why: what one trial asks for against what the
    cluster has (:func:`trial_fits`)."""
    bundles, cpus, gpus, fit = trial_fits(space, cluster)
    at_once = min(fit, max_concurrent) if max_concurrent else fit
    kind = "a local trial (the serial runner)" if bundles == 1 else f"a distributed trial, {bundles} bundles"
    log.info("dsac-tune: each trial asks for %g CPU(s)%s (%s); the cluster has %g CPUs / %g GPUs, so %d at "
             "once%s", cpus, f" and {gpus:g} GPU(s)" if gpus else "", kind, cluster.get("CPU", 0),
             cluster.get("GPU", 0), at_once, " (--max_concurrent)" if max_concurrent and max_concurrent < fit else "")


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s dsac %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stdout)
    try:
        config_path, weights = run(args)
    except DsacError as exc:
        print(f"dsac-tune: error: {exc}", file=sys.stderr)
        return 2
    print(f"best config: {config_path}")
    print(f"best weights: {weights}")
    return 0

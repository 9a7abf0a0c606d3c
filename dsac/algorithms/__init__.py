"""What an algorithm gives the rest of dsac: an :class:`Algorithm`, defined by its own package
(``dsac/algorithms/<name>/__init__.py``) and found by name through :mod:`dsac.settings.registry`.

The Ray wiring, the env checks, inference and export ask the algorithm what they need — its
policy class (whose acting network, :class:`dsac.models.acting_net.ActingNet`, export serves),
learner, defaults, which spaces it takes, which settings make a weights file fit — and so name
no algorithm themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# A run of at least this many env steps takes its algorithm's long_run_defaults: minutes of
# training, against which a start-up cost of seconds is small.
LONG_RUN_ENV_STEPS = 100_000
# How a long run of a built-in continuous-control algorithm evaluates: SB3's and rl-zoo's
# cadence, so its curve and its best evaluation compare with theirs point for point.
LONG_RUN_EVALUATION = {"eval_every": 10_000}


@dataclass(frozen=True)
class Algorithm:
    """An algorithm, as the rest of dsac sees it.

    Attributes:
        name: its ``--algo`` name.
        policy_class: its acting policy, a :class:`dsac.policy.ActingPolicy` (no TensorFlow).
        learner: ``"module:Name"`` of its learner, a :class:`dsac.algorithms.learner.Learner`
            built as ``Name(observation_space, action_space, config, seed=...)`` (TensorFlow:
            imported only where a learner is built).
        defaults: values of the config fields whose default is "algorithm default" (None).
        model_keys: the config keys besides the MLP's (``fcnet_hiddens``, ...) that shape its
            networks: a weights file records them and must match them to be loaded.
        check_spaces: ``check_spaces(env_id, observation_space, action_space)`` raises a
            one-line :class:`dsac.errors.DsacError` for spaces it cannot handle.
        atari_defaults: what differs from ``defaults`` when ``--env`` is an ALE game.
        image_defaults: what differs from ``defaults`` for other envs whose observations are
            images of side >= ``LARGE_IMAGE_SIDE`` (a conv encoder a CPU learner pays tens of
            milliseconds an update for); applied by :func:`dsac.runtime.preparation.prepare`, which
            knows the observation space, to the fields no flag set.
        long_run_defaults: what differs from ``defaults`` for a budget of at least
            :data:`LONG_RUN_ENV_STEPS` env steps: a cost paid once at start that only a long
            run earns back (XLA's compile), or a setting measured on such runs only.
    """

    name: str
    policy_class: type
    learner: str
    defaults: dict
    check_spaces: Callable
    model_keys: tuple[str, ...] = field(default_factory=tuple)
    atari_defaults: dict = field(default_factory=dict)
    image_defaults: dict = field(default_factory=dict)
    long_run_defaults: dict = field(default_factory=dict)

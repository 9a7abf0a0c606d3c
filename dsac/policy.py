"""The acting role every algorithm gives the system, and the Policy a user subclasses.

Rollout workers and the evaluator hold an :class:`ActingPolicy`: they call ``compute_actions``
and take weights with ``set_weights``. The learning role is a separate object (dsac's
algorithms: a :class:`dsac.algorithms.learner.Learner`) with ``learn_on_batches`` and
``get_weights``. A user's :class:`Policy` plays both roles: :mod:`dsac.runtime.build` makes it the
acting policy, and again with ``build_learner=True`` the learner. Nothing here knows about
Ray, so a policy can be trained, tested and debugged in one process.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from dsac.models.acting_net import numpy_forward, with_obs_normalization
from dsac.models.vision import obs_input


class ActingPolicy:
    """What acts: actions from observations with the weights it was last given.

    Args:
        observation_space: the env's observation space.
        action_space: the env's action space.
        config: the run's :class:`dsac.config.Config`.
        seed: seed of the policy's own randomness (exploration noise).
        worker_index: which rollout worker acts with this policy (None: the evaluator).
        num_workers: how many rollout workers there are (e.g. for Ape-X's ε per worker).
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config, *, seed: int = 0,
                 worker_index: int | None = None, num_workers: int = 1):
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.worker_index = worker_index
        self.num_workers = num_workers

    def compute_actions(self, obs_batch: np.ndarray, explore: bool = True) -> np.ndarray:
        """Actions, in the env's action space, for a batch of observations."""
        raise NotImplementedError

    def set_env_steps(self, env_steps: int) -> None:
        """The run's env-step count (all workers together), for schedules that follow it (DQN's
        ε): the runner calls it before each chunk with the count the run keeps — the replay's,
        checkpointed with the run — so a resumed run or a restarted worker carries on with the
        schedule. The default ignores it."""

    def random_actions(self, n: int) -> np.ndarray:
        """``n`` actions drawn uniformly from the action space (warm-up exploration)."""
        space = self.action_space
        if isinstance(space, gym.spaces.Box):
            return self.rng.uniform(space.low, space.high, size=(n, *space.shape)).astype(space.dtype)
        if isinstance(space, gym.spaces.Discrete):
            return space.start + self.rng.integers(0, space.n, size=n)
        raise NotImplementedError(f"no random actions for {space}")

    def postprocess_trajectory(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs on the rollout worker on each chunk before it is sent: add fields such as an
        initial ``priority`` per transition. The default returns the batch unchanged."""
        return batch

    def get_weights(self) -> dict[str, np.ndarray]:
        """The weights acting needs, by name (what travels to rollout workers)."""
        raise NotImplementedError

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Take weights produced by :meth:`get_weights`."""
        raise NotImplementedError

    def weight_shapes(self) -> dict[str, tuple[int, ...]] | None:
        """The name and shape of every array :meth:`set_weights` takes, or None when the policy
        cannot say (then :func:`check_policy_weights` checks types and values only)."""
        return None

    @property
    def has_weights(self) -> bool:
        """Whether the policy can act (rollout policies wait for their first weights)."""
        return True


class Policy(ActingPolicy):
    """Base class of a user's policy (``policy_class``), which plays both roles: built as is it
    acts (:class:`ActingPolicy`); built with ``build_learner=True`` it learns too
    (``learn_on_batch``, ``get_weights``).

    Optional, used where a subclass defines them: ``learn_on_batches(batches)`` (several updates
    in one call; else ``learn_on_batch`` on each), ``get_state()``/``set_state(state)`` (all
    that training needs to continue exactly, for checkpoints; else the weights) and
    ``check_weights(weights)`` (raise ValueError for weights that do not fit; else
    :func:`check_weights` against :meth:`weight_shapes`), and
    ``compute_flat_gradients(batch)``/``apply_flat_gradients(flat)`` (the gradients as one
    float32 array, as dsac's learners give them; else :meth:`compute_gradients`' list, joined).

    Args:
        observation_space, action_space, config, seed, worker_index, num_workers: as
            :class:`ActingPolicy`'s.
        build_learner: build the training side (networks, optimizers) too. Rollout workers
            and the evaluator leave it off.
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config, *,
                 build_learner: bool = False, seed: int = 0, worker_index: int | None = None,
                 num_workers: int = 1):
        super().__init__(observation_space, action_space, config, seed=seed, worker_index=worker_index,
                         num_workers=num_workers)

    def learn_on_batch(self, batch: dict[str, np.ndarray]) -> dict:
        """One gradient update on a batch of transitions; returns statistics (floats, and
        optionally ``td_abs``: per-transition |TD error| used as new priorities)."""
        raise NotImplementedError

    def compute_gradients(self, batch: dict[str, np.ndarray]) -> tuple[list[np.ndarray], dict]:
        """``learn_on_batch`` split in two for data-parallel learners (``--num_learners`` > 1):
        the update's gradients as a list of arrays, and its statistics (as ``learn_on_batch``
        returns them). The learners average the gradients and each applies the mean."""
        raise NotImplementedError(f"{type(self).__name__} cannot run with --num_learners > 1")

    def apply_gradients(self, gradients: list[np.ndarray]) -> bool | None:
        """Apply gradients shaped as :meth:`compute_gradients` returns them: the rest of one
        ``learn_on_batch`` (optimizer step, target networks); returns whether they were applied
        (dsac's learners skip non-finite ones)."""
        raise NotImplementedError(f"{type(self).__name__} cannot run with --num_learners > 1")


class BuiltinActingPolicy(ActingPolicy):
    """Base of dsac's own acting policies: the algorithm's acting network (:attr:`net`, the
    :class:`dsac.models.acting_net.ActingNet` its ``_describe`` returns) run in numpy on weights
    by name; a custom model's part runs through a
    :class:`dsac.models.keras_forward.KerasForward` (a subclass's ``__init__`` sets
    ``self.keras_forward``)."""

    keras_forward = None
    _weights: dict | None = None

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config, **kwargs):
        super().__init__(observation_space, action_space, config, **kwargs)
        self.obs = obs_input(observation_space)
        self.net = self._describe(self.obs, action_space, config)
        if config.model.normalize_obs:
            self.net = with_obs_normalization(self.net)

    @staticmethod
    def _describe(obs, action_space, config):
        """The algorithm's acting network on observations ``obs`` (an ObsInput)."""
        raise NotImplementedError

    def _forward(self, x):
        """The numpy forward pass; :meth:`set_weights` replaces it with one its weights are bound to."""
        self.get_weights()  # the error: no weights yet

    def weight_shapes(self):
        shapes = self.net.weight_shapes()
        if self.keras_forward is not None:
            tfv = self.keras_forward.variables
            shapes.update({name: tuple(var.shape) for name, var in zip(tfv.names, tfv.variables, strict=True)})
        return shapes

    @property
    def has_weights(self) -> bool:
        return self._weights is not None

    def get_weights(self):
        if self._weights is None:
            raise RuntimeError(f"{type(self).__name__} has no weights yet: call set_weights first")
        return self._weights

    def set_weights(self, weights):
        weights = {k: np.asarray(v, np.float32) for k, v in weights.items()}
        expected = set(self.weight_shapes())
        if set(weights) != expected:
            raise ValueError(
                f"{type(self).__name__} weights do not match: missing {sorted(expected - set(weights))}, "
                f"extra {sorted(set(weights) - expected)}"
            )
        if self.keras_forward is not None:
            self.keras_forward.set_weights({name: weights[name] for name in self.keras_forward.variables.names})
        self._forward = numpy_forward(self.net, weights, self.keras_forward)
        self._weights = weights


def check_policy_weights(policy, weights) -> None:
    """Raise ValueError naming the first way ``weights`` do not fit ``policy``: a user
    :class:`Policy`'s own ``check_weights``, else :func:`check_weights` against its
    ``weight_shapes``."""
    own = getattr(policy, "check_weights", None)
    if own is not None:
        own(weights)
    else:
        check_weights(weights, policy.weight_shapes())


def check_weights(weights, expected: dict[str, tuple[int, ...]] | None = None) -> None:
    """Raise ValueError naming the first problem of ``weights``: not a ``{name: array}``
    dict, a name missing from or extra to ``expected``, a shape that differs, a dtype that is
    not floating point, or a NaN/inf value."""
    if not isinstance(weights, dict):
        raise ValueError(f"weights must be a dict of arrays, got {type(weights).__name__}")
    if expected is not None:
        missing = [name for name in expected if name not in weights]
        if missing:
            raise ValueError(f"weight {missing[0]} is missing ({len(missing)} missing in all)")
        extra = [name for name in weights if name not in expected]
        if extra:
            raise ValueError(f"weight {extra[0]!r} is not in the network ({len(extra)} extra in all)")
    for name, array in weights.items():
        if not isinstance(array, np.ndarray):
            raise ValueError(f"weight {name!r} is a {type(array).__name__}, not a numpy array")
        if expected is not None and tuple(array.shape) != tuple(expected[name]):
            raise ValueError(f"weight {name} has shape {tuple(array.shape)}, the network needs {tuple(expected[name])}")
        if array.dtype.kind != "f":
            raise ValueError(f"weight {name} has dtype {array.dtype}, not a floating-point type")
        if not np.all(np.isfinite(array)):
            raise ValueError(f"weight {name} holds NaN or infinite values")

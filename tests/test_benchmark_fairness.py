"""The benchmark compares like for like: SB3's side evaluates on the very start states a dsac
run evaluates on, through the same function (checked without SB3 installed)."""

import importlib.util
import os

import numpy as np
from conftest import REPO_ROOT

from dsac.evaluation import evaluate, evaluation_seed


def _sb3_baseline():
    spec = importlib.util.spec_from_file_location("sb3_baseline", os.path.join(REPO_ROOT, "scripts", "sb3_baseline.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports no SB3 at module level
    return module


class Recording:
    """A policy with SB3's ``predict`` that remembers the observations it was first shown."""

    def __init__(self):
        self.first_obs = None

    def predict(self, obs, deterministic=False):
        if self.first_obs is None:
            self.first_obs = np.array(obs)
        return np.tanh(obs[:, :1]) * 2.0, None  # a fixed, state-dependent policy


def test_sb3_side_evaluates_on_the_start_states_of_dsac_runs():
    sb3_baseline = _sb3_baseline()
    model = Recording()
    returns = sb3_baseline.evaluate_model(model, "Pendulum-v1", seed=3, episodes=4)
    # dsac's evaluator of a --seed 3 run: evaluate(act, env, episodes, evaluation_seed(3)).
    seen = []
    dsac_returns = evaluate(lambda obs: (seen.append(np.array(obs)), np.tanh(obs[:, :1]) * 2.0)[1], "Pendulum-v1",
                            4, evaluation_seed(3))
    np.testing.assert_array_equal(model.first_obs, seen[0])  # the same four start states
    np.testing.assert_allclose(returns, dsac_returns)
    # ... which depend on the run's seed (a different seed, different start states).
    other = Recording()
    sb3_baseline.evaluate_model(other, "Pendulum-v1", seed=4, episodes=4)
    assert not np.allclose(other.first_obs, model.first_obs)


def test_dsac_runs_evaluate_on_evaluation_seed():
    """The distributed and the serial run take their evaluator's seed from that one function."""
    import dsac.distributed.system as system
    import dsac.serial as serial

    assert system.evaluation_seed is evaluation_seed and serial.evaluation_seed is evaluation_seed
    assert evaluation_seed(7) == 100_007  # the seed every earlier run evaluated with: results stay comparable

"""Warm starts and restarts keep what was learned: weights set from outside bring their targets
along, DQN's ε follows the run's own env-step count (so a resumed run carries on with it), and a
restarted parameter server never hands a worker weights older than those it holds."""

import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest

from dsac.algorithms.dqn.policy import linear_epsilon
from dsac.config import Config


def _random_like(weights: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {k: rng.normal(0, 0.1, np.shape(v)).astype(np.float32) for k, v in weights.items()}


def _equal(a_vars, b_vars) -> bool:
    return all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(a_vars, b_vars, strict=True))


def test_set_weights_brings_the_targets_of_what_it_was_given():
    from dsac.runtime.build import make_learner

    env = gym.make("CartPole-v1")
    learner = make_learner(Config(algo="dqn", env="CartPole-v1", fcnet_hiddens=[16]).validate(), env.observation_space,
                           env.action_space)
    given = _random_like(learner.get_weights(), 1)
    learner.set_weights(given)
    assert all(np.array_equal(v, given[k]) for k, v in learner.acting_weights.get_weights().items())
    assert _equal(learner.q_online.weights, learner.q_target.weights)  # not the random initial target

    config = Config(algo="sac", fcnet_hiddens=[16], conv_filters=[[8, 4, 2], [8, 3, 2]]).validate()
    observations = gym.spaces.Box(0, 255, (2, 32, 32, 3), np.uint8)
    sac = make_learner(config, observations, gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    critic_targets = [v.numpy().copy() for v in sac.q1_target.weights]
    sac.set_weights(_random_like(sac.get_weights(), 2))
    assert _equal(sac.encoder.weights, sac.encoder_target.weights)
    # The critics are not acting weights: they and their targets are left as they were.
    assert all(np.array_equal(a, b.numpy()) for a, b in zip(critic_targets, sac.q1_target.weights,
                                                            strict=True))


def test_one_workers_epsilon_carries_on_through_a_resume(tmp_path):
    from dsac import Trainer

    config = {"algo": "dqn", "env": "CartPole-v1", "eval_every": 10_000, "eval_episodes": 1, "seed": 0,
              "learning_starts": 200, "start_steps": 200, "steps_per_iteration": 600, "total_env_steps": 5_000,
              "exploration_fraction": 0.5, "model": {"fcnet_hiddens": [16]}, "output_dir": str(tmp_path / "run"),
              "tensorboard": False}
    with Trainer(config, local=True) as trainer:
        first = trainer.train()
        saved = trainer.save(str(tmp_path / "saved"))
    with Trainer.restore(saved, {"output_dir": str(tmp_path / "restored")}) as restored:
        restored.train()
        actor = restored._run.collect.policy
        # The schedule reads the run's count (restored from the checkpoint), not steps since start.
        assert actor.env_steps >= first["env_steps"] + 300
        assert actor._epsilon() == pytest.approx(linear_epsilon(actor.env_steps, 0.5 * 5_000, 0.02))
        assert actor._epsilon() < linear_epsilon(first["env_steps"], 0.5 * 5_000, 0.02)


def test_a_restarted_parameter_server_never_hands_out_older_weights(ray_local):
    from dsac.distributed.actors import ParameterServer
    from dsac.distributed.weights_client import pulled_weights

    ray = ray_local
    ps = ParameterServer.options(num_cpus=0, max_restarts=1, max_task_retries=-1).remote(0)
    for value in (1.0, 2.0, 3.0):
        ray.get(ps.push.remote({"w": np.full(2, value, np.float32)}))
    held = ray.get(ps.pull.remote(0, 0))
    assert held.version == 3 and pulled_weights(held.weights)["w"][0] == 3.0
    where = ray.get(ps.where.remote())
    os.kill(where["pid"], signal.SIGKILL)
    for _ in range(100):  # calls wait for the restarted actor; one sent before the kill landed may not
        if ray.get(ps.where.remote())["process"] != where["process"]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the parameter server was not restarted")
    # The driver gives it back the run's version and the weights it last saved, of version 1.
    ray.get(ps.restore.remote(3, {"w": np.full(2, 1.0, np.float32)}, 1, False))
    assert ray.get(ps.pull.remote(3, 0)).weights is None  # the worker holding v3 keeps it
    fresh = ray.get(ps.pull.remote(0, 1))  # a new worker, holding nothing, gets v1 as v1
    assert fresh.version == 1 and pulled_weights(fresh.weights)["w"][0] == 1.0
    assert ray.get(ps.latest.remote()).version == 1
    ray.get(ps.push.remote({"w": np.full(2, 4.0, np.float32)}))  # versions carry on above the run's
    newer = ray.get(ps.pull.remote(3, 0))
    assert newer.version == 4 and pulled_weights(newer.weights)["w"][0] == 4.0
    ray.kill(ps)


def test_a_learner_group_re_forms_from_the_learner_with_the_most_updates(ray_local):
    """The gradient averager's group protocol: all learners join, the one with the most updates
    shares its state, the others take it; a learner joining again (restarted) makes the others'
    rounds answer REGROUP, and the new group starts from the survivor's state, not the newcomer's."""
    from dsac.distributed.gradient_averager import REGROUP, GradientAverager

    ray = ray_local
    averager = GradientAverager.options(num_cpus=0).remote(2)
    first, second = averager.join.remote(0, 5), averager.join.remote(1, 9)
    group, state = ray.get(second)
    assert state is None  # learner 1 has the most updates: the group starts from its state
    assert ray.get(averager.share.remote(1, group, {"updates": 9}))
    assert ray.get(first) == (group, {"updates": 9})
    ones = np.ones(3, np.float32)
    rounds = [averager.average.remote(j, group, 9, ones * (j + 1), 10.0) for j in (0, 1)]
    for mean, total, beside in ray.get(rounds):
        np.testing.assert_array_equal(mean, ones * 1.5)
        assert total == 20.0 and beside == [None, None]
    waiting = averager.average.remote(1, group, 10, ones)  # learner 0 "died" before sending step 10
    rejoined = averager.join.remote(0, 2)  # its replacement, from an old checkpoint
    assert ray.get(waiting) == REGROUP
    survivor = averager.join.remote(1, 10)
    new_group, state = ray.get(survivor)
    assert new_group > group and state is None
    assert ray.get(averager.share.remote(1, new_group, {"updates": 10}))
    assert ray.get(rejoined) == (new_group, {"updates": 10})
    assert ray.get(averager.average.remote(0, group, 10, ones)) == REGROUP  # the old group is gone
    ray.get(averager.stop.remote())
    assert ray.get(averager.average.remote(0, new_group, 10, ones)) is None
    ray.kill(averager)

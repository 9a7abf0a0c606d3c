"""Learning-rate schedules (dsac.settings.schedules): their text, their checks, a real learner's optimizer
stepping along one, and a checkpoint that continues it (and a restored run taking its own lr)."""

import gymnasium as gym
import numpy as np
import pytest

from dsac.config import Config
from dsac.errors import DsacError
from dsac.runtime.build import make_learner
from dsac.runtime.learning import UpdateLoop
from dsac.settings import schedules

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("text, parsed", [
    (3e-4, 3e-4), ("3e-4", 3e-4), ("linear(7.3e-4, 0)", schedules.Linear(7.3e-4, 0.0)),
    ("lin_7.3e-4", schedules.Linear(7.3e-4, 0.0)), (" linear( 1e-3 ,1e-4, 0.5 ) ", schedules.Linear(1e-3, 1e-4, 0.5)),
])
def test_a_schedule_reads_as_sb3_and_rl_zoo_write_it(text, parsed):
    assert schedules.parse("lr", text) == parsed
    config = Config(env="Pendulum-v1", lr=text, total_env_steps=10_000).validate()
    assert config.lr == (parsed if isinstance(parsed, float) else str(parsed))  # what config.json keeps
    assert schedules.parse("lr", config.lr) == parsed


@pytest.mark.parametrize("config, message", [
    ({"lr": "linear(1e-3)"}, "--lr must be a number or a schedule like"),
    ({"lr": "cosine(1e-3, 0)"}, "--lr must be a number or a schedule like"),
    ({"lr": "linear(1e-3, 0, 1.5)"}, "its fraction must be in (0, 1]"),
    ({"lr": "linear(0, 1e-3)"}, "start > 0, end >= 0"),
    ({"lr": "linear(1e-3, -1e-4)"}, "start > 0, end >= 0"),
    ({"lr": -1.0}, "--lr must be a positive number"),
])
def test_a_bad_schedule_is_one_line_naming_the_flag(config, message):
    with pytest.raises(DsacError) as err:
        Config.from_dict({"env": "Pendulum-v1", **config}).validate()
    assert message in str(err.value) and "\n" not in str(err.value)


def batch_for(env, n=8):
    obs = RNG.normal(size=(n, *env.observation_space.shape)).astype(np.float32)
    return {"obs": obs, "action": np.stack([env.action_space.sample() for _ in range(n)]),
            "reward": RNG.normal(size=n).astype(np.float32), "next_obs": obs[::-1].copy(),
            "terminated": np.zeros(n, np.float32), "discount": np.full(n, 0.99, np.float32)}


def learning_rates(learner):
    optimizers = [learner.optimizer] if hasattr(learner, "optimizer") else [
        learner.actor_optimizer, learner.critic_optimizer, learner.alpha_optimizer]
    return [float(o.learning_rate) for o in optimizers]


@pytest.mark.parametrize("algo, env_id", [("sac", "Pendulum-v1"), ("dqn", "CartPole-v1")])
def test_a_learner_follows_its_schedule_and_a_checkpoint_continues_it(algo, env_id):
    """linear(1e-3, 1e-4, 0.5) over (120 - 20) * 1 = 100 updates: 1e-3 - 9e-4 * k / 50 after k
    updates, 1e-4 from the 50th on; a run restored from a checkpoint goes on from its update
    count. A constant learning rate is the run's own after a restore, not the checkpoint's."""
    env = gym.make(env_id)
    config = Config(algo=algo, env=env_id, fcnet_hiddens=[8], lr="linear(1e-3, 1e-4, 0.5)", total_env_steps=120,
                    learning_starts=20, updates_per_step=1.0).validate()
    a = make_learner(config, env.observation_space, env.action_space, 0)
    loop = UpdateLoop(a, config.push_every, config.max_nonfinite_updates)
    assert learning_rates(a) == pytest.approx([1e-3] * len(learning_rates(a)))
    for _ in range(10):
        loop.step({key: value[None] for key, value in batch_for(env).items()})
    assert learning_rates(a) == pytest.approx([1e-3 - 9e-4 * 10 / 50] * len(learning_rates(a)), rel=1e-5)
    state = loop.state()
    b = make_learner(config, env.observation_space, env.action_space, 1)
    UpdateLoop(b, config.push_every, config.max_nonfinite_updates).set_state(state)
    assert learning_rates(b) == pytest.approx(learning_rates(a), rel=1e-5)  # carried on, not from 1e-3
    for _ in range(45):
        loop.step({key: value[None] for key, value in batch_for(env).items()})
    assert learning_rates(a) == pytest.approx([1e-4] * len(learning_rates(a)), rel=1e-5)  # its end, kept

    constant = Config(algo=algo, env=env_id, fcnet_hiddens=[8], lr=5e-4).validate()
    c = make_learner(constant, env.observation_space, env.action_space, 2)
    older = {**state, **{f"{name}/learning_rate": np.float32(1e-3) for name in ("optimizer", "actor_optimizer")}}
    # An older checkpoint's saved learning rates are not taken.
    UpdateLoop(c, constant.push_every, constant.max_nonfinite_updates).set_state(older)
    assert learning_rates(c) == pytest.approx([5e-4] * len(learning_rates(c)))

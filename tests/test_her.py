"""Hindsight experience replay in the rollout workers (``--her``): every stored transition's
reward is what the env's ``compute_reward`` gives for its goal, no transition crosses an
episode's end, the replay and its rate limiter count env steps rather than stored copies, a bad
fit is one line, and on bit flipping DQN learns with relabeling what it cannot learn without."""

import json

import gymnasium as gym
import numpy as np
import pytest

from dsac.config import Config
from dsac.envs.make import make_env
from dsac.envs.rollout import EnvCollector
from dsac.errors import DsacError
from dsac.replay.buffer import RateLimiter, Replay, ReplayStorage, field_specs
from dsac.replay.her import GoalObservation, HindsightRelabeler
from dsac.runtime.messages import Chunk
from examples.bit_flipping import BitFlipping
from examples.point_reach import PointReach

BITS = "examples.bit_flipping:BitFlipping"


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_every_stored_transition_is_scored_by_compute_reward_within_its_own_episode(strategy):
    n, k = 8, 4
    collector = EnvCollector(BITS, 3, seed=0, env_kwargs={"n": n}, her_k=k, her_strategy=strategy)
    rng = np.random.default_rng(0)
    batch = collector.collect(lambda obs: rng.integers(0, n, len(obs)), 400)
    steps = collector.total_steps
    stored = len(batch["reward"])
    assert stored % (k + 1) == 0 and 0 < stored <= (k + 1) * steps
    state, goal = batch["obs"][:, :n], batch["obs"][:, n:]
    next_state, next_goal = batch["next_obs"][:, :n], batch["next_obs"][:, n:]
    np.testing.assert_array_equal(goal, next_goal)  # a transition keeps its goal
    assert (np.abs(next_state - state).sum(axis=1) == 1).all()  # one bit flipped: no episode boundary crossed
    env = BitFlipping(n)
    np.testing.assert_array_equal(batch["reward"], env.compute_reward(next_state, goal, None))
    np.testing.assert_array_equal(batch["terminated"], env.compute_terminated(next_state, goal, None))
    real_successes = sum(e[0] > -e[1] for e in collector.drain_episodes())  # a -1 on every step but the last
    assert (batch["reward"] == 0).sum() > (k + 1) * real_successes  # what relabeling adds


def test_future_goals_come_from_the_same_step_or_later():
    relabeler = HindsightRelabeler(6, "future", (3,), seed=1)
    steps = relabeler.goal_steps(10)
    assert steps.shape == (6, 10)
    assert (steps >= np.arange(10)).all() and (steps <= 9).all()
    assert (HindsightRelabeler(2, "final", (3,)).goal_steps(5) == 4).all()


def test_the_replay_and_its_limiter_count_env_steps_not_stored_copies():
    specs = field_specs((4,), np.float32, (), np.int64)
    storage = ReplayStorage(specs, capacity=1000)
    chunk = {"obs": np.zeros((50, 4), np.float32), "action": np.zeros(50, np.int64), "reward": np.zeros(50, np.float32),
             "next_obs": np.zeros((50, 4), np.float32), "terminated": np.zeros(50, np.float32),
             "discount": np.full(50, 0.99, np.float32)}
    storage.add(chunk, env_steps=10)  # 10 env steps, 4 hindsight copies each
    assert storage.added == 10 and storage.size == 50
    storage.add({key: value[:0] for key, value in chunk.items()}, env_steps=7)  # an episode still running
    assert storage.added == 17 and storage.size == 50
    limiter = RateLimiter(updates_per_step=1.0, learning_starts=20, max_steps_ahead=100)
    assert not limiter.can_sample(storage.added, 0, 1)  # 50 stored, but only 17 env steps
    storage.add(chunk, env_steps=10)
    assert limiter.can_sample(storage.added, 0, 1) and storage.added == 27


def test_episodes_longer_than_the_warm_up_keep_the_learner_waiting_and_the_writers_collecting():
    """An episode's steps count as they happen, its transitions arrive when it ends: until the
    first arrive the learner may not sample (nothing to sample), and the writers' budget goes
    on past learning_starts + max_steps_ahead, which an update ratio on an empty replay would
    never lift."""
    specs = field_specs((4,), np.float32, (), np.int64)
    replay = Replay(ReplayStorage(specs, capacity=10_000), 100, learning_starts=100, updates_per_step=1.0,
                    max_steps_ahead=50, max_chunk=50, batches_per_call=4)
    episode = {"obs": np.zeros((5 * 400, 4), np.float32), "action": np.zeros(2000, np.int64),
               "reward": np.zeros(2000, np.float32), "next_obs": np.zeros((2000, 4), np.float32),
               "terminated": np.zeros(2000, np.float32), "discount": np.full(2000, 0.99, np.float32)}
    running = {key: value[:0] for key, value in episode.items()}
    steps = 0
    while steps < 350:  # a 400-step episode, 50 steps a chunk, none of it stored yet
        assert replay.grant(0, 0) == 50 and not replay.can_sample(4)
        replay.add(Chunk(running, None, 50))
        steps += 50
    assert replay.grant(0, 0) == 50 and not replay.can_sample(4)
    replay.add(Chunk(episode, None, 50))  # it ends: 400 steps, 5 rows each
    assert replay.added == 400 and replay.storage.size == 2000
    while replay.can_sample(4):
        assert replay.sample(32, 4).batches["reward"].shape == (4, 32)
    # The update ratio counts from the warm-up's end (350 env steps): 50 updates and one call's
    # slack now, not the 300 that counting from learning_starts would allow at once.
    assert replay.storage.sampled_batches == 52


def test_a_compute_terminated_that_is_not_vectorized_is_asked_goal_by_goal():
    """gymnasium-robotics' non-continuing mazes answer a batch of goals with one flag; each
    relabeled row gets its own, as the env gives it at a step."""

    class OneFlagForABatch(PointReach):
        def compute_terminated(self, achieved_goal, desired_goal, info):
            return bool(np.linalg.norm(np.asarray(achieved_goal) - np.asarray(desired_goal)) <= 0.3)

    env = OneFlagForABatch(max_steps=30)
    relabeler = HindsightRelabeler(4, "future", (2,), seed=0)
    rng = np.random.default_rng(0)
    achieved = np.cumsum(rng.uniform(-0.1, 0.1, (30, 2)), axis=0).astype(np.float32)
    goal = np.full(2, 0.9, np.float32)
    obs = np.concatenate([achieved, np.tile(goal, (30, 1))], axis=1)
    episode = {"obs": obs, "action": np.zeros((30, 2), np.float32), "reward": np.full(30, -1.0, np.float32),
               "next_obs": obs, "terminated": np.zeros(30, np.float32), "discount": np.full(30, 0.99, np.float32)}
    batch = relabeler.relabel(episode, achieved, [{}] * 30, env)
    copies = batch["next_obs"][30:]
    expected = [env.compute_terminated(row[:2], row[2:], {}) for row in copies]
    assert copies.shape == (120, 4) and list(batch["terminated"][30:]) == expected
    assert 0 < sum(expected) < 120  # the goals a copy reaches at once end it, and only those

    class NoFlag(PointReach):
        def compute_terminated(self, achieved_goal, desired_goal, info):
            return np.zeros(3)

    with pytest.raises(DsacError, match=r"compute_terminated gave shape \(3,\) for 120 goals and \(3,\) for one goal"):
        relabeler.relabel(episode, achieved, [{}] * 30, NoFlag())


def test_sac_with_her_and_the_defaults_runs_episodes_longer_than_its_warm_up(tmp_path, capfd, caplog):
    """400-step episodes, SAC's defaults (its learning starts at 200 env steps): the run goes to
    its budget and learns from the second episode on."""
    from conftest import launch_here

    out = tmp_path / "run"
    run = launch_here(["--env", "examples.point_reach:PointReach", "--env_kwargs", '{"max_steps": 400}', "--her",
                       "--local", "--total_env_steps", "1000", "--eval_every", "1000", "--eval_episodes", "1",
                       "--output_dir", out], capfd, caplog)
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_steps"] == 1000 and summary["updates"] > 0, summary


def test_sac_learns_a_continuous_goal_task_with_her_its_budget_in_env_steps(tmp_path, capfd, caplog):
    """PointReach (FetchReach's shape: a sparse reward within 0.05 of a goal, 50-step episodes):
    SAC with --her reaches its goals; the run stops at its env-step budget, not at the 5x as
    many transitions it stored. Without --her SAC stays at 0 (seen by hand: 0.00 at 4,000)."""
    from conftest import launch_here

    out = tmp_path / "run"
    run = launch_here(["--env", "examples.point_reach:PointReach", "--her", "--local", "--total_env_steps", "3000",
                       "--eval_every", "3000", "--eval_episodes", "20", "--seed", "0", "--output_dir", out],
                      capfd, caplog)
    assert run.returncode == 0, run.stderr[-2000:]
    last = json.loads((out / "progress.jsonl").read_text().splitlines()[-1])
    assert last["env_steps"] == 3000 and last["eval_success_rate"] >= 0.9, last
    assert ", success 1.00" in run.stdout or ", success 0.9" in run.stdout  # the log says it too


@pytest.mark.parametrize("flags, message", [
    (["--env", "Pendulum-v1", "--her"], "--her needs a Dict observation with keys observation, achieved_goal, "
     "desired_goal, but Pendulum-v1 has"),
    (["--algo", "dqn", "--env", BITS, "--her", "--n_step", "3"], "--her relabels one-step transitions"),
    (["--env", BITS, "--her", "--her_k", "-1"], "--her_k must be an integer in [0, 64]"),
])
def test_a_bad_fit_is_one_line_before_ray_starts(flags, message, tmp_path, capfd, caplog):
    from conftest import launch_here

    run = launch_here([*flags, "--output_dir", tmp_path / "run"], capfd, caplog)
    assert run.returncode == 2 and message in run.stderr, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and not (tmp_path / "run").exists()


def test_an_env_without_compute_reward_is_refused():
    class NoReward(BitFlipping):
        compute_reward = None

    with pytest.raises(DsacError, match="needs the env's compute_reward"):
        GoalObservation(NoReward())


@pytest.mark.slow
def test_dqn_learns_bit_flipping_with_her_and_not_without(tmp_path, capfd, caplog):
    """n=15 bits (the HER paper's pair): without relabeling a random policy meets its goal about
    once in 2^15 / 15 episodes, so every reward is -1 and nothing is learned; with it, the goals
    the episodes reached teach the Q-network to flip the bits that differ. The same flags
    otherwise (without --her the Dict is flattened, as a user would run it)."""
    from conftest import launch_here

    rates = {}
    for her in (True, False):
        out = tmp_path / f"her-{her}"
        flags = ["--algo", "dqn", "--env", BITS, "--env_kwargs", '{"n": 15}', "--local", "--total_env_steps", "8000",
                 "--learning_starts", "1000", "--fcnet_hiddens", "256", "--lr", "1e-3", "--target_update_every", "500",
                 "--eval_every", "4000", "--eval_episodes", "20", "--seed", "0", "--output_dir", out]
        run = launch_here([*flags, "--her" if her else "--flatten_obs"], capfd, caplog)
        assert run.returncode == 0, run.stderr[-2000:]
        lines = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
        rates[her] = lines[-1]["eval_success_rate"]
    assert rates[True] >= 0.8 and rates[False] <= 0.1, rates


def test_load_policy_takes_the_goal_dict_as_the_env_gives_it(tmp_path, capfd, caplog):
    from conftest import launch_here

    from dsac import load_policy

    out = tmp_path / "run"
    run = launch_here(["--algo", "dqn", "--env", BITS, "--env_kwargs", '{"n": 5}', "--her", "--local",
                       "--total_env_steps", "400", "--learning_starts", "100", "--eval_every", "400",
                       "--output_dir", out], capfd, caplog)
    assert run.returncode == 0, run.stderr[-2000:]
    policy = load_policy(str(out / "weights.pkl"), trust_code=True)
    env = BitFlipping(5)
    obs, _ = env.reset(seed=0)
    flat = np.concatenate([obs["observation"], obs["desired_goal"]])
    assert policy(obs) == policy(flat) and 0 <= policy(obs) < 5
    batch = {key: np.stack([value, value]) for key, value in obs.items()}
    np.testing.assert_array_equal(policy(batch), [policy(flat)] * 2)
    made = policy.make_env()
    assert isinstance(made.observation_space, gym.spaces.Box) and made.observation_space.shape == (10,)
    assert isinstance(make_env(BITS, {"n": 5}).observation_space, gym.spaces.Dict)
    assert Config(env=BITS, her=True).validate().replay.n_step == 1
    # ONNX takes the Dict's keys as its inputs, as the env gives them
    import onnxruntime as ort

    from dsac.export import export_onnx

    _, signature = export_onnx(str(out / "weights.pkl"), str(tmp_path / "goal.onnx"), trust_code=True)
    inputs = "observation float32[batch, 5], achieved_goal float32[batch, 5], desired_goal float32[batch, 5] ->"
    assert signature.startswith(inputs), signature
    observations = [env.reset(seed=s)[0] for s in range(50)]
    feed = {key: np.stack([o[key] for o in observations]) for key in obs}
    action, _ = ort.InferenceSession(str(tmp_path / "goal.onnx")).run(None, feed)
    np.testing.assert_array_equal(action, policy(feed))


class _MazeKeyBitFlipping(gym.Wrapper):
    """Bit flipping saying success as gymnasium-robotics' mazes do: ``info["success"]``."""

    def __init__(self, **kwargs):
        super().__init__(BitFlipping(**kwargs))

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {"success": info["is_success"]}


@pytest.mark.parametrize("env_id", [BITS, "MazeKeyBitFlipping-v0"])
def test_evaluation_reads_success_under_either_key(env_id):
    from dsac.runtime.evaluation import play_episodes

    if "MazeKeyBitFlipping-v0" not in gym.registry:
        gym.register("MazeKeyBitFlipping-v0", entry_point=_MazeKeyBitFlipping)
    n = 6

    def solve(obs):  # flip the first bit that differs from the goal (observation ++ desired_goal)
        return np.argmax(obs[:, :n] != obs[:, n:], axis=1)

    solved = play_episodes(solve, env_id, 8, seed=0, env_kwargs={"n": n}, goal=True).summary()
    stuck = play_episodes(lambda obs: np.zeros(len(obs), np.int64), env_id, 8, seed=0, env_kwargs={"n": n},
                          goal=True).summary()
    assert solved["eval_success_rate"] == 1.0 and stuck["eval_success_rate"] < 0.5, (solved, stuck)


def test_distributed_sac_relabels_in_its_workers_and_reaches_its_goals(ray_local, tmp_path):
    """Two rollout workers relabel their own episodes and send them to the replay actor; the
    run's budget and evaluations count env steps across both."""
    from dsac.runtime.runner import run

    config = Config(env="examples.point_reach:PointReach", her=True, num_workers=2, total_env_steps=4000,
                    eval_every=1000, eval_episodes=20, seed=0, output_dir=str(tmp_path / "run"),
                    tensorboard=False).validate()
    summary = run(config)
    lines = [json.loads(line) for line in (tmp_path / "run" / "progress.jsonl").read_text().splitlines()]
    rates = [line["eval_success_rate"] for line in lines]
    assert rates[0] <= 0.5 and max(rates) >= 0.9, rates
    assert 4000 <= summary["env_steps"] <= 5000, summary  # not the ~5x as many transitions stored

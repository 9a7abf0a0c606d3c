"""The benchmark compares like for like: SB3's side evaluates on the very start states a dsac
run evaluates on, through the same function (checked without SB3 installed)."""

import importlib
import os
import re

import numpy as np
import pytest

from dsac.runtime.evaluation import evaluate, evaluation_seed


def _sb3_baseline():
    return importlib.import_module("benchmarks.sb3_baseline")  # imports no SB3 at module level


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
    """The distributed and the serial run take their evaluator's seed from the builder, which
    takes it from that one function."""
    from dsac.runtime import build
    assert build.evaluation_seed is evaluation_seed and build.role_seeds(7, 3).evaluator == evaluation_seed(7)
    assert evaluation_seed(7) == 100_007  # the seed every earlier run evaluated with: results stay comparable


def _script(name):
    return importlib.import_module(f"benchmarks.{name}")


def test_parity_settings_mean_the_same_on_both_sides():
    """Every parity task's settings reach dsac's config and SB3's constructor as the same
    numbers: sizes, lr, batch, buffer, warm-up, update ratio, target period (SB3 counts it in env
    steps, dsac in updates), exploration."""
    from dsac.cli import build_parser
    from dsac.config import Config
    from dsac.settings.schedules import parse

    harness, parity = _script("harness"), _script("parity")
    for name, task in parity.TASKS.items():
        algo, s = task["algo"], task["settings"]
        values = vars(build_parser().parse_args([*harness.dsac_flags(algo, s), "--env", task["env"]]))
        values.pop("config")
        config = Config.from_dict(values).validate()
        sb3 = harness.sb3_kwargs(algo, s)
        assert config.fcnet_hiddens == s["hidden"] == sb3["policy_kwargs"]["net_arch"], name
        lr = {parse("lr", value) for value in (config.lr, s["lr"], sb3["learning_rate"])}  # rl-zoo's lin_X too
        assert len(lr) == 1, (name, lr)
        assert config.batch_size == s["batch_size"] == sb3["batch_size"]
        assert config.buffer_size == s["buffer_size"] == sb3["buffer_size"]
        assert config.start_steps == config.learning_starts == s["warmup"] == sb3["learning_starts"]
        assert config.updates_per_step == s["updates_per_step"] == sb3["gradient_steps"] / sb3["train_freq"]
        assert config.gamma == sb3["gamma"]
        if algo == "sac":
            assert config.tau == s["tau"] == sb3["tau"]
        else:
            assert sb3["tau"] == 1.0  # hard copies on both sides
            assert config.target_update_every == s["target_every"]
            assert sb3["target_update_interval"] * config.updates_per_step == config.target_update_every
            assert config.exploration_fraction == sb3["exploration_fraction"]
            assert config.final_epsilon == sb3["exploration_final_eps"]
            assert config.n_step == sb3["n_steps"] == 1
            assert not (config.dueling or config.double_q or config.prioritized)  # SB3 has none of them


def test_parity_refuses_settings_sb3_cannot_run():
    harness = _script("harness")
    import pytest

    with pytest.raises(ValueError, match="SB3"):
        harness.sb3_kwargs("dqn", {"dueling": True})


def test_parity_keeps_stored_runs_and_refuses_to_overwrite_them(tmp_path):
    """A sitting adds to runs made at the same budget and settings; one at another budget stops
    before running anything, with a one-line error naming the file, and leaves it as it was."""
    import json

    import pytest

    parity = _script("parity")
    task = parity.TASKS["sac-pendulum"]
    stored = {"budget": task["budget"], "seeds": [0], "settings": task["settings"], "variants": {"serial": []}}
    assert parity.task_results({"sac-pendulum": stored}, "sac-pendulum", task["budget"], str(tmp_path)) is stored
    fresh = parity.task_results({}, "sac-pendulum", 1_000, str(tmp_path))
    assert fresh["budget"] == 1_000 and fresh["variants"] == {}
    stored_at = re.escape("parity.json holds sac-pendulum runs at 15,000 env steps")
    with pytest.raises(parity.StoredRunsDiffer, match=stored_at):
        parity.task_results({"sac-pendulum": stored}, "sac-pendulum", 1_000, str(tmp_path))
    changed = {**stored, "settings": {**task["settings"], "lr": 3e-4}}
    with pytest.raises(parity.StoredRunsDiffer, match="other settings"):
        parity.task_results({"sac-pendulum": changed}, "sac-pendulum", task["budget"], str(tmp_path))

    path = tmp_path / "parity.json"
    path.write_text(json.dumps({"sac-pendulum": stored}))
    before = path.read_text()
    assert parity.main(["--tasks", "sac-pendulum", "--variants", "serial", "--num_seeds", "1", "--budget", "1000",
                        "--out", str(tmp_path)]) == 2
    assert path.read_text() == before


def test_sb3_side_reads_rl_zoo_linear_schedules():
    """rl-zoo's ``lin_X`` learning rates (LunarLanderContinuous' lin_7.3e-4) become SB3's schedule
    from X at the start (progress remaining 1) to 0 at the end; plain numbers pass through."""
    schedule = _sb3_baseline()._schedule("lin_7.3e-4")
    assert schedule(1.0) == 7.3e-4 and schedule(0.5) == 7.3e-4 / 2 and schedule(0.0) == 0.0
    assert _sb3_baseline()._schedule(1e-3) == 1e-3


def test_area_under_the_curve_marks_a_run_that_collapses_after_its_threshold():
    harness = _script("harness")
    held = [{"env_steps": s, "return": r} for s, r in ((0, 10.0), (25_000, 500.0), (50_000, 500.0))]
    collapsed = [{"env_steps": s, "return": r} for s, r in ((0, 10.0), (25_000, 500.0), (37_500, 20.0), (50_000, 20.0))]
    assert harness.area_under_curve(held, 50_000) == 255.0  # half the budget at 10, half at 500
    assert harness.area_under_curve(collapsed, 50_000) == 135.0  # the same threshold time, a quarter at 500
    assert harness.first_reaching(held, 475)["env_steps"] == harness.first_reaching(collapsed, 475)["env_steps"]
    assert harness.area_under_curve([], 50_000) is None


def test_scores_at_marks_read_a_capped_run_as_the_tables_need():
    """A 15-minute run: the 5-minute score is the last evaluation made by 300 s; the 15-minute
    score is the evaluation of the weights it stopped with, which lands a little after 900 s."""
    harness = _script("harness")
    points = [{"env_steps": s, "return": r, "wall_s": t, "updates": s}
              for s, r, t in ((10_000, 1.0, 100.0), (30_000, 2.0, 299.0), (40_000, 3.0, 301.0), (90_000, 4.0, 912.0))]
    scores = harness.scores_at_marks(points, [5, 15, 60], 15)
    assert scores["5"]["return"] == 2.0 and scores["5"]["env_steps"] == 30_000
    assert scores["15"]["return"] == 4.0 and scores["15"]["wall_s"] == 912.0
    assert "60" not in scores
    assert harness.scores_at_marks([], [5], 5) == {}
    record = harness.provenance(["python", "launch.py", "--env_kwargs", '{"g": 9.81}'])
    assert record["command"] == """python launch.py --env_kwargs '{"g": 9.81}'"""  # as a shell takes it
    assert record["commit"] and record["machine"]["cpus"]


def test_seed_flags_name_seeds_or_count_them_never_both():
    """``--seeds 3`` is seed 3; ``--num_seeds 3`` is seeds 0, 1, 2; both at once is refused."""
    import argparse

    harness = _script("harness")
    parser = argparse.ArgumentParser()
    harness.add_seed_flags(parser, "0 1")
    harness.add_seed_flags(parser, "0", prefix="lunar_")
    assert harness.seeds_of(parser.parse_args(["--seeds", "3"]), [0, 1]) == [3]
    assert harness.seeds_of(parser.parse_args(["--num_seeds", "3"]), [0, 1]) == [0, 1, 2]
    assert harness.seeds_of(parser.parse_args([]), [0, 1]) == [0, 1]
    assert harness.seeds_of(parser.parse_args(["--lunar_seeds", "4", "5"]), [0], prefix="lunar_") == [4, 5]
    with pytest.raises(SystemExit):
        parser.parse_args(["--seeds", "1", "--num_seeds", "2"])
    with pytest.raises(SystemExit, match="num_seeds must be >= 1"):
        harness.seeds_of(parser.parse_args(["--num_seeds", "0"]), [0])


def test_a_benchmark_run_leaves_no_run_directory_behind():
    """harness.run_dsac runs launch.py into a temporary directory, which ``use_output`` may read
    (the Atari table draws its curve there) and which is gone afterwards."""
    harness, seen = _script("harness"), {}

    def use_output(path):
        seen["path"], seen["files"] = path, sorted(os.listdir(path))

    run = harness.run_dsac(
        ["--local", "--fcnet_hiddens", "16", "16", "--learning_starts", "100", "--start_steps", "100"],
        "Pendulum-v1", 0, 400, 200, timeout=300, use_output=use_output)
    assert run["error"] is None and run["points"] and run["points"][-1]["env_steps"] == 400, run
    assert "progress.jsonl" in seen["files"] and "weights.pkl" in seen["files"], seen
    assert not os.path.exists(os.path.dirname(seen["path"]))


def test_the_mujoco_table_compares_dsac_with_sb3_only_within_one_sitting(tmp_path):
    """dsac's time to SB3's final return is a ratio of two runs: given only for runs of one sitting
    (one snapshot commit, one day), never across sittings."""
    import json

    mujoco = _script("mujoco")

    def record(side, commit, curve, flags=()):
        return {"env": "Ant-v5", "side": side, "seed": 0, "minutes": 15.0, "flags": list(flags), "commit": commit,
                "date": "2026-11-26T12:00:00+00:00",
                "command": f"{side} {commit}", "scores": {"15": {"return": curve[-1][1], "env_steps": curve[-1][0]}},
                "best": max(c[1] for c in curve), "curve": curve, "error": None}

    sb3 = record("sb3", "bbb", [[10_000, 900.0, 30.0, 0], [33_000, 180.0, 900.0, 23_000]])
    same = record("dsac", "bbb", [[1_000, 100.0, 20.0, 700], [2_000, 200.0, 56.0, 1_700]], ["--lr", "3e-4"])
    other = record("dsac", "aaa", [[1_000, 500.0, 40.0, 700]])
    later = {**record("dsac", "bbb", [[1_000, 500.0, 40.0, 700]], ["--tau", "0.01"]),
             "date": "2026-11-29T09:00:00+00:00"}
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (other, sb3, same, later)))
    rows = {line.split(" | ")[2]: line for line in mujoco.report(str(path)).splitlines()
            if line.startswith("| Ant") and ", seed " in line}  # the per-run table
    assert "56 s (SB3: 180 at 900 s)" in rows["dsac sac --lr 3e-4"]
    for label in ("dsac sac", "dsac sac --tau 0.01"):  # another commit; the same commit days later
        assert "another sitting" in rows[label] and " s (SB3" not in rows[label], rows[label]


def test_the_matched_peers_run_rl_zoos_settings_at_dsacs_widths_batch_and_update_ratio():
    """A matched peer row differs from dsac's side in the implementation, not in the networks,
    the batch or the updates per env step: those come from dsac's own settings for the env, its
    preset included; every other setting stays rl-zoo's."""
    from dsac.config import Config
    from dsac.settings.presets import presets

    mujoco = _script("mujoco")
    for env in ("HalfCheetah-v5", "Ant-v5"):
        sac, crossq = (Config.from_dict({"algo": a, "env": env}).validate() for a in ("sac", "crossq"))
        matched = mujoco.matched_settings(env, "sac")
        assert matched["policy_kwargs"] == {"net_arch": list(sac.fcnet_hiddens)}
        assert (matched["batch_size"], matched["train_freq"], matched["gradient_steps"]) == (sac.batch_size, 1, 1)
        assert matched["learning_starts"] == mujoco.ZOO_SAC_MUJOCO["learning_starts"]
        matched = mujoco.matched_settings(env, "crossq")
        assert matched["policy_kwargs"]["net_arch"] == {"pi": list(crossq.fcnet_hiddens),
                                                        "qf": list(crossq.critic_hiddens)}
        zoo = {k: v for k, v in mujoco.ZOO_CROSSQ_MUJOCO.items() if k != "policy_kwargs"}
        assert {k: matched[k] for k in zoo} == zoo and matched["batch_size"] == crossq.batch_size
    assert mujoco.matched_settings("Ant-v5", "sac")["policy_kwargs"]["net_arch"] == \
        presets()["Ant-v5"]["sac"]["set"]["fcnet_hiddens"]  # the env's preset, not the plain default

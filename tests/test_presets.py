"""Settings by env (dsac/settings/presets.yaml): every entry carries the record it was chosen
from, sets an algorithm's hyperparameters only, applies to the flags a run does not give, and
is named in the log; --preset none turns it off, --preset NAME uses another env's."""

import json
import logging
import os
import re
import shlex

import pytest
from conftest import REPO_ROOT

from dsac.cli import build_parser
from dsac.config import SECTION_OF, Config
from dsac.errors import DsacError
from dsac.settings.presets import PRESET_SECTIONS, env_name, presets, record_commits

ENTRIES = [(env, algo, entry) for env, algos in presets().items() for algo, entry in algos.items()]


def typed_flags(command: str) -> dict:
    """The flags a recorded ``python launch.py ...`` command typed, read by launch.py's own parser."""
    words = shlex.split(command)
    return vars(build_parser(suppress_defaults=True).parse_args(words[words.index("launch.py") + 1:]))


@pytest.mark.parametrize("env, algo, entry", ENTRIES, ids=[f"{env}-{algo}" for env, algo, _ in ENTRIES])
def test_every_preset_names_the_runs_that_chose_it_and_they_ran_with_it(env, algo, entry):
    record = entry["record"]
    rows = [json.loads(line) for line in open(os.path.join(REPO_ROOT, record["file"]))]
    settings = {**entry["set"], **(entry.get("when") or {})}

    def ran_with_it(row) -> bool:
        given = typed_flags(row["command"])
        ran = Config.from_dict({**given, "preset": "none"}).validate()  # the values a run got from them
        return all(flag in given and getattr(ran, flag) == value for flag, value in settings.items())

    # The runs of those commits on the env with the entry's settings (a sitting may also hold
    # runs of other candidates): exactly the seeds named, each whole, at the budget named.
    commits = record_commits(record)
    runs = [row for row in rows if row.get("side") == "dsac" and row.get("commit") in commits
            and env_name(row.get("env")) == env and row.get("algo", "sac") == algo and ran_with_it(row)]
    assert sorted(row["seed"] for row in runs) == sorted(record["seeds"]), (env, algo, record)
    for row in runs:
        budget = row["budget"] if "budget" in row else f"{row['minutes']:g} minutes"  # env steps, or a wall clock
        assert budget == record["budget"] and not row.get("error"), row
    assert entry["why"].strip()

    # What those runs ran is what the entry gives today: every hyperparameter a preset may set,
    # from the settings a record keeps (an entry of the defaults needs them: its evidence holds
    # only while the defaults are what ran).
    today = Config.from_dict({"env": env, "algo": algo, **(entry.get("when") or {})}).validate()
    assert entry["set"] or all("settings" in row for row in runs), "an entry of the defaults needs runs with settings"
    for row in runs:
        ran = {flag: value for flag, value in row.get("settings", {}).items()
               if SECTION_OF.get(flag) in PRESET_SECTIONS and value != getattr(today, flag)}
        assert not ran, (row["commit"], row["seed"], "ran with", ran)


@pytest.mark.parametrize("env, algo, entry", ENTRIES, ids=[f"{env}-{algo}" for env, algo, _ in ENTRIES])
def test_a_preset_sets_an_algorithms_hyperparameters_only(env, algo, entry):
    assert set(entry) <= {"when", "set", "why", "record"}
    for flag in entry["set"]:
        assert SECTION_OF[flag] in PRESET_SECTIONS, flag  # never --algo, workers, learners, addresses, paths
    Config.from_dict({"env": env, "algo": algo, **(entry.get("when") or {})}).validate()


def test_a_preset_fills_what_is_not_given_and_says_so(caplog):
    with caplog.at_level(logging.INFO, logger="dsac"):
        config = Config.from_dict({"env": "gymnasium_robotics:FetchReach-v4", "her": True, "gamma": 0.98}).validate()
    assert (config.gamma, config.lr, config.learning_starts, config.run.preset) == (0.98, 1e-3, 1000, "FetchReach-v4")
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("preset FetchReach-v4")]
    assert len(logged) == 1 and "--lr 0.001, --learning_starts 1000;" in logged[0] and "--gamma" not in logged[0]
    assert "benchmarks/results/her/results.jsonl at 707e952" in logged[0]

    off = Config.from_dict({"env": "FetchReach-v4", "her": True, "preset": "none"}).validate()
    assert (off.gamma, off.learning_starts, off.run.preset) == (0.99, 200, "none")
    without_her = Config.from_dict({"env": "FetchReach-v4", "flatten_obs": True}).validate()
    assert (without_her.gamma, without_her.run.preset) == (0.99, None)  # its entry is for --her runs
    borrowed = Config.from_dict({"env": "my_envs:Reach", "her": True, "preset": "PointMaze_UMaze-v3"}).validate()
    assert (borrowed.gamma, borrowed.run.preset) == (0.95, "PointMaze_UMaze-v3")
    # A run's config.json holds every flag: resuming it sets nothing anew.
    again = Config.from_dict({**json.loads(json.dumps(config.to_dict())), "gamma": 0.97}).validate()
    assert (again.gamma, again.lr, again.run.preset) == (0.97, 1e-3, "FetchReach-v4")


@pytest.mark.parametrize("values, refusal", [
    ({"preset": "FetchReach-v3"}, "no such preset (did you mean FetchReach-v4?)"),
    ({"preset": "FetchReach-v4", "algo": "crossq", "her": True}, "has settings for sac, not --algo crossq"),
    ({"preset": "FetchReach-v4"}, "is for runs with --her"),
])
def test_a_preset_that_does_not_fit_is_one_line(values, refusal):
    with pytest.raises(DsacError, match=re.escape(refusal)):
        Config.from_dict(values)


def test_the_command_line_fills_a_preset_into_the_flags_not_typed(caplog):
    """launch.py builds its config from the flags typed: a parser default (--gamma's 0.99,
    --lr's "the algorithm's") is not a flag given, so the preset fills it."""
    from dsac.cli import main

    with caplog.at_level(logging.INFO, logger="dsac"):
        code = main(["--env", "Pendulum-v1", "--her", "--preset", "FetchReach-v4", "--gamma", "0.97"])
    assert code == 2  # Pendulum is no goal task: refused once the config is built, before Ray starts
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("preset FetchReach-v4")]
    assert len(logged) == 1 and "--lr 0.001, --learning_starts 1000;" in logged[0] and "--gamma" not in logged[0]


def test_an_entry_of_the_defaults_sets_nothing_and_names_its_runs(caplog):
    with caplog.at_level(logging.INFO, logger="dsac"):
        config = Config.from_dict({"env": "HalfCheetah-v5"}).validate()
    off = Config.from_dict({"env": "HalfCheetah-v5", "preset": "none"}).validate()
    assert {**config.to_dict(), "preset": None} == {**off.to_dict(), "preset": None}
    assert config.run.preset == "HalfCheetah-v5"
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("preset HalfCheetah-v5")]
    assert len(logged) == 1 and "no flag (its settings are the defaults)" in logged[0]
    assert "benchmarks/results/mujoco/results.jsonl at 74bc94b, seeds 0, 1, 2" in logged[0]

"""Config by concern: sections, flat names, the config.json of runs written before sections."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dsac.config import (
    ALGORITHMS_OF,
    RETIRED,
    SECTION_OF,
    SECTIONS,
    Config,
    config_fields,
)
from dsac.errors import DsacError
from dsac.settings.records import RECORD_EXCLUDED_KEYS
from dsac.settings.sections import ReplaySettings

BEFORE = Path(__file__).parent / "data" / "config_json_before_sections"


@pytest.mark.parametrize("path", sorted(BEFORE.glob("*.json")), ids=lambda p: p.stem)
def test_a_config_json_written_before_sections_loads_with_every_value(path):
    """Files written by dsac 358bd1a (2026-11-23) and 1645b82 (the last flat Config) load into
    the sections with every value they hold, and validate; they hold every algorithm's settings,
    and those of the other algorithm than the run's are left out."""
    saved = json.loads(path.read_text())
    # A run's record: where it connects and writes comes from the command line, as --resume gives them.
    typed = {key: saved[key] for key in RECORD_EXCLUDED_KEYS if key in saved and key != "resume"}
    config = Config.load(str(path), typed)
    others = {key for key, owners in ALGORITHMS_OF.items() if saved["algo"] not in owners}
    then_known = {key for key in others if {"sac", "dqn"} & set(ALGORITHMS_OF[key])}  # the algorithms of then
    assert then_known and then_known <= saved.keys()
    for key in others:
        assert not hasattr(config, key) and not hasattr(config.algorithm, key), key
    skipped = {"custom_models", "defaulted", *RETIRED, *others}
    for key, value in saved.items():
        if key in skipped:
            continue
        assert getattr(config, key) == value, key
        assert getattr(getattr(config, SECTION_OF[key]), key) == value, key
    written = config.replace(output_dir=None).validate().to_dict()  # what a run of it would save
    for key in saved.keys() - skipped - {"output_dir"}:
        assert written[key] == saved[key], key

def test_every_flag_lives_in_exactly_one_section_and_reads_flat():
    names = [f.name for f in config_fields()]
    assert len(names) == len(set(names)) == len(SECTION_OF)
    config = Config(env="CartPole-v1", algo="dqn", buffer_size=5_000, framestack=2, eval_episodes=3)
    assert (config.replay.buffer_size, config.frames.framestack, config.output.eval_episodes) == (5_000, 2, 3)
    assert config.buffer_size == 5_000 and config.run.env == "CartPole-v1"
    for name in SECTIONS:
        assert dataclasses.is_dataclass(getattr(config, name))


def test_the_algorithm_section_holds_the_chosen_algorithms_settings_only(caplog):
    """SAC's section has no DQN key and DQN's no SAC key; flat construction, replace and a
    change of algorithm keep the shared settings; another algorithm's flag is accepted, left
    out and, when it says something of its own, named in the log."""
    import logging

    from dsac.algorithms.dqn.config import DQNSettings
    from dsac.algorithms.sac.config import SACSettings

    sac = Config(algo="sac", lr=3e-4, tau=0.01, dueling=False).validate()
    assert type(sac.algorithm) is SACSettings and (sac.algorithm.lr, sac.lr, sac.tau) == (3e-4, 3e-4, 0.01)
    assert not hasattr(sac.algorithm, "target_update_every") and "target_update_every" not in sac.to_dict()
    with pytest.raises(AttributeError, match="'dueling' is a setting of --algo dqn, not of --algo sac"):
        sac.dueling  # noqa: B018
    dqn = sac.replace(algo="dqn", num_atoms=11)
    assert type(dqn.algorithm) is DQNSettings and (dqn.lr, dqn.num_atoms, dqn.dueling) == (3e-4, 11, True)
    assert dqn.validate().target_update_every == 100 and "tau" not in dqn.to_dict()
    with caplog.at_level(logging.WARNING, logger="dsac"):
        caplog.clear()
        Config.from_dict({"algo": "sac", "dueling": True, "target_update_every": 100})  # defaults: quiet
        assert not caplog.text
        config = Config.from_dict({"algo": "sac", "dueling": False, "num_atoms": 51})
    assert "--algo sac ignores other algorithms' settings: --dueling (dqn), --num_atoms (dqn)" in caplog.text
    assert config == Config(algo="sac")


def test_sections_and_flat_names_build_the_same_config_and_a_config_never_changes():
    by_section = Config(algo="dqn", replay=ReplaySettings(buffer_size=7_000, n_step=3))
    flat = Config(algo="dqn", buffer_size=7_000, n_step=3)
    assert by_section == flat
    changed = flat.replace(n_step=5, lr=1e-3)
    assert (flat.n_step, changed.n_step, changed.buffer_size, changed.lr) == (3, 5, 7_000, 1e-3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        flat.n_step = 4
    with pytest.raises(TypeError, match="unexpected keyword argument 'buffer'"):
        Config(buffer=1)


def test_a_file_may_group_its_keys_by_section(tmp_path):
    path = tmp_path / "grouped.json"
    path.write_text(json.dumps({"algo": "dqn", "env": "CartPole-v1", "replay": {"buffer_size": 9_000},
                                "algorithm": {"lr": 5e-4}, "model": {"fcnet_hiddens": [32]}}))
    config = Config.load(str(path))
    assert (config.buffer_size, config.lr, config.fcnet_hiddens) == (9_000, 5e-4, [32])
    path.write_text(json.dumps({"replay": {"buffer_sise": 9_000}}))
    with pytest.raises(DsacError, match=r"unknown config key 'buffer_sise'.*buffer_size"):
        Config.load(str(path))


@pytest.mark.parametrize("flags, message", [
    ({"priority_beta": 1.5}, "--priority_beta must be in"),  # replay
    ({"push_every": 0}, "--push_every must be a positive integer"),  # flow
    ({"framestack": 40}, "--framestack must be an integer in"),  # frames
    ({"log_every": -1.0}, "--log_every must be a positive number"),  # output
    ({"num_workers": 1, "num_learners": 2}, "--num_learners 2 exceeds --num_workers 1"),  # resources
    ({"gamma": 0.0}, "--gamma must be in"),  # algorithm
    ({"fcnet_hiddens": [0]}, "--fcnet_hiddens must be positive"),  # model
    ({"batch_size": 512, "buffer_size": 256}, "--batch_size 512 is larger than the replay capacity"),  # across
])
def test_each_section_checks_its_own_fields_in_one_line(flags, message):
    with pytest.raises(DsacError, match=message) as info:
        Config(env="CartPole-v1", algo="dqn", **flags).validate()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("saved", [
    {"env": "Pendulum-v1", "model": {"custom_model": "dsac_no_such_module:builder"}},  # RLlib's model dict
    {"run": {"policy_class": "dsac_no_such_module:Policy"}},  # a section's group
    {"run": {"trust_code": True, "callbacks": "dsac_no_such_module:Callbacks"}},  # consent is never the file's
])
def test_code_named_inside_a_group_of_an_untrusted_file_is_refused_like_a_flat_key(tmp_path, saved):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(saved))
    with pytest.raises(DsacError, match=r"names code to import: .*nothing was imported"):
        Config.load(str(path))
    assert Config.load(str(path), trusted=True) is not None  # the user's own --config file may


@pytest.mark.parametrize("saved, message", [
    ({"replay": {"lr": 0.1}}, "config key 'lr' belongs to section 'algorithm', not 'replay'"),
    ({"replay": 3}, "config key 'replay' must be a mapping"),
    ({"lr": 0.1, "algorithm": {"lr": 0.2}}, "config key 'lr' is given twice"),
    ({"model": {"fcnet_hidden": [8]}}, "unknown model config key 'fcnet_hidden'.*fcnet_hiddens"),
])
def test_a_group_holds_only_its_own_keys_once(tmp_path, saved, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(saved))
    with pytest.raises(DsacError, match=message) as info:
        Config.load(str(path))
    assert str(info.value).startswith(str(path))


def test_a_run_ships_only_the_custom_model_it_names():
    """Every process of a run unpickles the builders its config carries: a registered model the
    run does not use would load its module (and the TensorFlow that imports) in every rollout
    worker of every later run in this process."""
    import dsac

    def linear(input_dim, output_dim, model_config, name):  # never called: only shipped
        raise AssertionError

    dsac.register_custom_model("test_config_linear", linear)
    dsac.register_custom_model("test_config_other", linear)
    assert Config(env="Pendulum-v1").validate().custom_models == {}
    named = Config.from_dict({"env": "Pendulum-v1", "custom_model": "test_config_linear"}).validate()
    assert named.custom_models == {"test_config_linear": linear}
    with pytest.raises(DsacError, match="test_config_linear"):  # a near miss is still named
        Config.from_dict({"env": "Pendulum-v1", "custom_model": "test_config_linea"}).validate()


@pytest.mark.parametrize("flags, xla, batches, every", [
    ({}, False, 16, 1_000),  # SAC's default budget, 20,000 env steps: the compile would not pay back
    ({"total_env_steps": 100_000}, True, 32, 10_000),
    ({"total_env_steps": 1_000_000, "learner_xla": False, "batches_per_sample": 8, "eval_every": 2_000},
     False, 8, 2_000),  # flags win
    ({"total_env_steps": 1_000_000, "algo": "dqn"}, False, 16, 1_000),  # only SAC's and CrossQ's long runs
    ({"total_env_steps": 1_000, "algo": "crossq"}, True, 16, 1_000),  # CrossQ's XLA default, whatever the budget
    ({"total_env_steps": 1_000_000, "algo": "crossq"}, True, 16, 10_000),
])
def test_long_runs_compile_with_xla_sample_more_batches_a_call_and_evaluate_less_often(flags, xla, batches, every):
    config = Config.from_dict({"env": "Pendulum-v1", **flags}).validate().resolved()
    assert (config.resources.learner_xla, config.flow.batches_per_sample, config.output.eval_every) == (
        xla, batches, every)


def test_a_long_sac_run_on_large_images_keeps_the_plain_update():
    from dsac.runtime.preparation import image_fills

    config = Config.from_dict({"env": "CarRacing-v3", "total_env_steps": 1_000_000}).validate().resolved()
    assert config.resources.learner_xla is True and image_fills(config, (96, 96, 3))["learner_xla"] is False
    assert config.flow.batches_per_sample == 32 and image_fills(config, (96, 96, 3))["batches_per_sample"] == 16
    given = Config.from_dict({"env": "CarRacing-v3", "learner_xla": True}).validate().resolved()
    assert "learner_xla" not in image_fills(given, (96, 96, 3))

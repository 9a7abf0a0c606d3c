"""The MuJoCo table's statistics and rendering, on synthetic records (no training): the IQM and
its bootstrap interval as rliable defines them, old records read as SAC's, one-seed rows without
an interval, the machine's pace from the records or the sitting's side file, and a run loop that
labels every record with its algorithm and pace."""

import json

import numpy as np
import pytest
import scipy.stats

from benchmarks import learner_update, mujoco, stats


@pytest.mark.parametrize("values, expected", [
    ([7.0], 7.0), ([1.0, 3.0], 2.0), ([3.0, 1.0, 2.0], 2.0), ([1.0, 2.0, 3.0, 4.0], 2.5),
    ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 100.0], 4.5),  # two off each end: the outlier counts for nothing
])
def test_iqm_is_rliables_trimmed_mean(values, expected):
    assert stats.iqm(values) == pytest.approx(expected)
    assert stats.iqm(values) == pytest.approx(scipy.stats.trim_mean(values, 0.25))


def test_iqm_matches_scipy_along_an_axis():
    x = np.random.default_rng(1).normal(size=(50, 9))
    np.testing.assert_allclose(stats.iqm(x, axis=-1), scipy.stats.trim_mean(x, 0.25, axis=1))


def test_bootstrap_interval_is_a_seeded_percentile_bootstrap():
    x = [100.0, 900.0, 2000.0]
    lo, hi = stats.bootstrap_interval(x)
    assert (lo, hi) == stats.bootstrap_interval(x)  # the same text each time the docs regenerate
    rng = np.random.default_rng(stats.BOOTSTRAP_SEED)
    means = np.asarray(x)[rng.integers(0, 3, size=(stats.BOOTSTRAP_REPS, 3))].mean(axis=1)  # IQM of 3: their mean
    assert (lo, hi) == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])))
    assert 100.0 <= lo < stats.iqm(x) < hi <= 2000.0
    assert stats.bootstrap_interval([5.0, 5.0, 5.0]) == (5.0, 5.0)
    assert stats.bootstrap_interval([5.0]) is None


def test_summaries_leave_out_missing_values_and_give_an_interval_only_from_five_runs():
    s = stats.summarize([3.0, None, 1.0, float("nan"), 2.0])
    assert (s["n"], s["median"], s["iqm"], s["ci"]) == (3, 2.0, 2.0, None)  # 3 runs: no interval
    assert stats.fmt_summary(s) == ("2 (n=3)", "runs: 3 / 1 / 2")
    median, iqm = stats.fmt_summary(stats.summarize([1000.0, 2000.0, 3000.0, 2500.0, 1500.0]))
    assert median == "2,000" and iqm.startswith("2,000 [") and iqm.endswith("]")
    assert stats.fmt_summary(stats.summarize([5442.4])) == ("5,442 (n=1)", "runs: 5,442")
    assert stats.fmt_summary(stats.summarize([None])) == ("—", "—")


def record(side="dsac", seed=0, final=1000.0, best=None, algo=None, flags=(), commit="aaa",
           date="2026-11-27T01:00:00+00:00", pace=None, env="Walker2d-v5", every=10_000):
    """A result record as ``mujoco.run`` writes it (old ones: no ``algo``, no pace), evaluated
    every ``every`` env steps up to 60,000, the last evaluation its final score."""
    steps = range(every, 60_001, every)
    curve = [[n, final * n / 60_000, 905.0 * n / 60_000, n - 1_000] for n in steps]
    rec = {"suite": "mujoco", "env": env, "side": side, "seed": seed, "minutes": 15.0, "flags": list(flags),
           "command": f"{side} {algo} {seed}", "commit": commit, "date": date,
           "scores": {"5": {"return": final / 2, "env_steps": 5_000}, "15": {"return": final, "env_steps": 60_000}},
           "best": best if best is not None else final, "curve": curve, "error": None}
    if algo is not None:
        rec["algo"] = algo
    if pace is not None:
        rec["pace_updates_per_s"] = pace
    return rec


def test_rows_are_labelled_by_side_and_algorithm_old_records_as_sac():
    assert mujoco.label_of(record()) == "dsac sac"
    assert mujoco.label_of(record(algo="crossq", flags=["--lr", "3e-4"])) == "dsac crossq --lr 3e-4"
    assert mujoco.label_of(record(side="sb3")) == "sb3 sac"
    assert mujoco.label_of(record(side="sb3-crossq", algo="crossq")) == "sb3-contrib crossq"


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


# The line above the table of runs.
RUNS_HEADER = "(every 1,000 as far as its evaluator's CPU budget allowed)."


def table_rows(text, header):
    """{side label: row cells} of the table under ``header``'s line."""
    table = text.split(header, 1)[1].split("\n\n", 2)[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    return {(row[1], row[2]): row for row in rows}


def test_report_groups_seeds_with_statistics_and_pace(tmp_path):
    records = [record(algo="crossq", seed=s, final=f, best=b, pace=p) for s, f, b, p in
               ((0, 3000.0, 3500.0, 400.0), (1, 1000.0, 1200.0, 380.0), (2, 2000.0, 2100.0, 420.0))]
    records += [record(), record(side="sb3", commit="bbb", date="2026-11-26T05:00:00+00:00"),
                record(side="sb3-crossq", algo="crossq", final=900.0)]
    path = write(tmp_path / "results.jsonl", records)
    (tmp_path / "pace.jsonl").write_text(json.dumps({"commit": "bbb", "date": "2026-11-26T04:00:00+00:00",
                                                     "pace_updates_per_s": 228.0, "command": "..."}) + "\n")
    text = mujoco.report(path)
    groups = table_rows(text, "Over runs")
    crossq = groups[("15 min", "dsac crossq")]
    assert crossq[3:5] == ["3 (0, 1, 2)", "2,000 (n=3)"], crossq
    assert crossq[5] == "runs: 3,000 / 1,000 / 2,000" and crossq[6] == "2,100 (n=3)"  # 3 runs: no interval
    assert crossq[8] == "400 (380–420)" and crossq[9] == "aaa 2026-11-27"
    assert groups[("15 min", "dsac sac")][3:9] == ["1 (0)", "1,000 (n=1)", "runs: 1,000", "1,000 (n=1)",
                                                   "runs: 1,000", "—"]  # an old record: SAC's, no pace anywhere
    assert groups[("15 min", "sb3 sac")][8] == "228"  # its sitting's pace, from pace.jsonl
    runs = table_rows(text, RUNS_HEADER)
    assert runs[("15 min, seed 1", "dsac crossq")][-2] == "380"
    assert runs[("15 min, seed 0", "dsac sac")][-2] == "—"
    # a best evaluation where the run evaluated as often as the SB3 sides (every 10,000), on every side
    assert runs[("15 min, seed 0", "dsac sac")][5] == "1,000" and runs[("15 min, seed 0", "sb3 sac")][5] == "1,000"
    assert groups[("15 min", "sb3 sac")][6:8] == ["1,000 (n=1)", "runs: 1,000"]
    # Each dsac algorithm is timed against its own peer, within one sitting only.
    assert "(sb3-contrib: 900 at 905 s)" in runs[("15 min, seed 0", "dsac crossq")][-4]
    assert "SB3 ran in another sitting" in runs[("15 min, seed 0", "dsac sac")][-4]


def test_every_run_counts_a_repeated_seed_too(tmp_path):
    """Two runs of seed 0 with the same settings (a seed does not fix a distributed run) are two
    rows of the runs table and two runs of the configuration; five runs get an interval."""
    runs = [record(algo="crossq", final=f, seed=s) for s, f in ((0, 1433.0), (0, 3655.0), (1, 2131.0))]
    text = mujoco.report(write(tmp_path / "results.jsonl", runs))
    assert text.count("| Walker2d-v5 | 15 min, seed 0 | dsac crossq |") == 2
    row = table_rows(text, "Over runs")[("15 min", "dsac crossq")]
    assert row[3:6] == ["3 (0, 0, 1)", "2,131 (n=3)", "runs: 1,433 / 3,655 / 2,131"], row
    five = runs + [record(algo="crossq", final=f, seed=s) for s, f in ((2, 2399.0), (3, 2800.0))]
    row = table_rows(mujoco.report(write(tmp_path / "five.jsonl", five)), "Over runs")[("15 min", "dsac crossq")]
    lo, hi = stats.bootstrap_interval([1433.0, 3655.0, 2131.0, 2399.0, 2800.0])
    assert row[3] == "5 (0, 0, 1, 2, 3)" and row[5].endswith(f"[{lo:,.0f}, {hi:,.0f}]"), row


def sac_settings(**changed):
    """What a run of SAC on Walker2d-v5 with nothing typed ran, as the present code builds it."""
    from benchmarks import settings

    return {**settings.baseline("sac", "Walker2d-v5"), **changed}


def test_runs_group_by_the_settings_they_ran_not_the_flags_they_typed(tmp_path):
    """--learner_xla typed where it is what ran anyway joins the runs that typed nothing; the same
    empty command line at a commit whose defaults differ is another configuration, named by the
    setting it differs in; a record made before records carried settings takes them from
    settings.jsonl by its commit and command; peers keep their labels."""
    plain, xla = sac_settings(learner_xla=False), sac_settings(learner_xla=True)
    old = record(seed=2, final=1500.0, commit="old")  # no settings of its own
    runs = [record(seed=0, final=1000.0, commit="c1") | {"settings": plain},
            record(seed=1, final=3000.0, commit="c2", flags=["--learner_xla", "false"]) | {"settings": plain},
            old, record(seed=0, final=5000.0, commit="c3") | {"settings": xla},
            record(side="sb3", final=400.0)]
    path = write(tmp_path / "results.jsonl", runs)
    (tmp_path / "settings.jsonl").write_text(json.dumps(
        {"commit": "old", "command": old["command"], "settings": {k: v for k, v in plain.items() if k != "lr"}}) + "\n")
    groups = table_rows(mujoco.report(path), "Over runs")
    assert groups[("15 min", "dsac sac [learner_xla False]")][3:5] == ["3 (0, 1, 2)", "1,500 (n=3)"]
    assert groups[("15 min", "dsac sac [learner_xla True]")][3] == "1 (0)"
    assert groups[("15 min", "sb3 sac")][3] == "1 (0)"
    # one name for one configuration on every env: the aggregate pools it across them; the preset
    # that chose a run's settings is not itself a setting
    ant = write(tmp_path / "ant.jsonl", [*runs, record(env="Ant-v5", final=700.0, commit="c1") | {
        "settings": {**plain, "preset": "Ant-v5"}}])
    assert "| Ant-v5 | 15 min | dsac sac [learner_xla False] | 1 (0) |" in mujoco.report(ant)
    rows = table_rows(mujoco.report(path), RUNS_HEADER)
    assert ("15 min, seed 1", "dsac sac [learner_xla False] (typed: dsac sac --learner_xla false, at c2)") in rows
    (tmp_path / "settings.jsonl").unlink()  # the old record's settings unknown: a row of its own
    groups = table_rows(mujoco.report(path), "Over runs")
    assert groups[("15 min", "dsac sac [settings unknown]")][3] == "1 (2)"
    assert groups[("15 min", "dsac sac [learner_xla False]")][3] == "2 (0, 1)"


def test_a_best_evaluation_only_for_runs_that_evaluated_as_often_as_the_peers(tmp_path):
    """A maximum over evaluations grows with their number: dsac's runs that evaluated every
    1,000 env steps show no best beside SB3's every 10,000; a run's cadence is read from its
    curve (the evaluator's budget can thin what the flag asked for), within 10%."""
    runs = [record(seed=0, best=1500.0, every=1_000), record(seed=1, best=1600.0, every=10_000),
            record(seed=2, best=1700.0, every=9_000), record(side="sb3", best=1200.0)]
    assert [mujoco.evaluates_every(r) for r in runs] == [1_000, 10_000, 9_000, 10_000]
    assert [mujoco.best_of(r) for r in runs] == [None, 1600.0, 1700.0, 1200.0]
    assert mujoco.evaluates_every(record() | {"curve": [[5_000, 1.0, 1.0, 1]]}) is None
    rows = table_rows(mujoco.report(write(tmp_path / "results.jsonl", runs)), RUNS_HEADER)
    assert [rows[(f"15 min, seed {s}", "dsac sac")][5] for s in (0, 1, 2)] == ["—", "1,600", "1,700"]


def test_an_aggregate_pools_normalized_scores_over_envs_with_a_stratified_interval(tmp_path):
    walker, ant = mujoco.SUITE["Walker2d-v5"][1], mujoco.SUITE["Ant-v5"][1]
    runs = [record(algo="crossq", env=env, seed=s, final=f * score) for env, score in
            (("Walker2d-v5", walker), ("Ant-v5", ant)) for s, f in ((0, 0.5), (1, 1.0), (2, 1.5))]
    runs += [record(env="Ant-v5", final=ant)]  # dsac sac on one env: no row
    text = mujoco.report(write(tmp_path / "results.jsonl", runs))
    table = text.split("rows over different envs do not compare.", 1)[1].split("\n\n", 2)[1]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    lo, hi = stats.stratified_interval([[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]])
    assert rows == [["15 min", "dsac crossq", "Walker2d-v5 (3), Ant-v5 (3)", "1.00",
                     f"1.00 [{lo:.2f}, {hi:.2f}]"]], rows


def test_the_readme_headline_shows_every_run_and_no_best(tmp_path):
    runs = [record(algo="crossq", seed=s, final=f) for s, f in ((0, 1433.0), (0, 3655.0), (1, 2131.0))]
    runs += [record(side="sb3", final=504.0, best=900.0)]
    text = mujoco.headline(write(tmp_path / "results.jsonl", runs))
    assert "| Walker2d-v5, 15 min | dsac crossq | 2,131 (n=3); runs: 1,433 / 3,655 / 2,131 | 3,863 (1M) | aaa |" in text
    assert "| Walker2d-v5, 15 min | sb3 sac | 504 (n=1); runs: 504 |" in text and "900" not in text
    # the real records: every run of each configuration is in the README
    import os

    real = os.path.join(os.path.dirname(mujoco.__file__), "results", "mujoco", "results.jsonl")
    readme = open(os.path.join(os.path.dirname(real), "..", "..", "..", "README.md")).read()
    for rec in mujoco.load(real).values():
        final = rec["scores"].get(f"{rec['minutes']:g}", {}).get("return")
        assert final is None or f"{final:,.0f}" in readme, rec["command"]


def test_a_stratified_bootstrap_resamples_each_task_among_its_own_runs():
    tasks = [[0.0, 1.0], [10.0, 11.0, 12.0]]
    lo, hi = stats.stratified_interval(tasks, statistic=np.mean, reps=500)
    # every resample holds two runs of the first task and three of the second: a mean of
    # [0, 2] * 2/5 + [10, 12] * 3/5 lies in [6, 7.6]; an unstratified one could reach 0 or 12
    assert 6.0 <= lo <= hi <= 7.6
    assert stats.stratified_interval([[1.0, 2.0], [3.0]]) is None  # one run says nothing of its task's spread
    s = stats.summarize_tasks([[1.0, 2.0], [3.0, None, 4.0]])
    assert (s["n"], s["ci"]) == (4, None)  # fewer than five runs: no interval
    assert stats.summarize_tasks([[1.0, 2.0, 3.0], [3.0, 4.0]])["ci"] is not None


def test_report_links_each_envs_curves_and_plot_draws_them(tmp_path):
    path = write(tmp_path / "results.jsonl", [record(), record(algo="crossq", seed=1), record(env="Ant-v5")])
    text = mujoco.report(path, figures="../figs/")
    assert "[Walker2d-v5](../figs/Walker2d-v5.png), [Ant-v5](../figs/Ant-v5.png)" in text
    written = mujoco.plot(path, str(tmp_path / "out"))
    assert sorted(written) == sorted(str(tmp_path / "out" / f"{env}.png") for env in ("Walker2d-v5", "Ant-v5"))
    assert all(open(png, "rb").read(4) == b"\x89PNG" for png in written)


def test_pace_is_the_plain_rows_first_round():
    table = ("| obs x act | variant | updates/s (each round) | first call s |\n|---|---|---|---|\n"
             "| 17 x 6 | plain | 412 / 399 | 2.1 / 2.0 |\n| 17 x 6 | xla | 530 | 9.0 |\n")
    assert learner_update.plain_rate(table) == 412.0
    assert learner_update.plain_rate("benchmarks: error: ...") is None


def test_a_sitting_runs_each_dsac_algorithm_and_each_peer_with_the_machines_pace(tmp_path, monkeypatch):
    calls = []

    def fake_dsac(flags, env, seed, budget, eval_every, timeout=None, as_typed=False, use_output=None):
        calls.append(("dsac", flags))
        run_dir = tmp_path / f"run{len(calls)}"
        run_dir.mkdir()
        (run_dir / "config.json").write_text(json.dumps({"algo": flags[1], "lr": 3e-4, "seed": seed, "env": env}))
        use_output(str(run_dir))
        return {"points": [{"env_steps": 1000, "updates": 900, "wall_s": 30.0, "return": 5.0}], "error": None,
                "command": ["python", "launch.py", *flags]}

    def fake_sb3(algo, env, kwargs, seed, budget, eval_every, timeout=None, max_seconds=None):
        calls.append((algo, kwargs))
        return None if algo == "crossq" else {"points": [], "error": None, "command": ["python", "-m", "x"]}

    monkeypatch.setattr(mujoco.harness, "run_dsac", fake_dsac)
    monkeypatch.setattr(mujoco.harness, "run_sb3", fake_sb3)
    monkeypatch.setattr(learner_update, "machine_pace", lambda: (321.0, "python -m benchmarks learner-update"))
    out = tmp_path / "results.jsonl"
    assert mujoco.main(["--envs", "Ant-v5", "--sides", "dsac", "sb3", "sb3-crossq", "--algos", "sac", "crossq",
                        "--seeds", "3", "--minutes", "1", "--flags=--lr 3e-4", "--out", str(out)]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["side"], r["algo"], r["flags"]) for r in recs] == [
        ("dsac", "sac", ["--lr", "3e-4"]), ("dsac", "crossq", ["--lr", "3e-4"]), ("sb3", "sac", []),
        ("sb3-crossq", "crossq", [])]
    assert all(r["pace_updates_per_s"] == 321.0 and r["seed"] == 3 for r in recs)
    # dsac's records carry what their config.json says ran, less where and which seed
    assert [r["settings"] for r in recs] == [{"algo": "sac", "lr": 3e-4}, {"algo": "crossq", "lr": 3e-4}, None, None]
    assert calls[1] == ("dsac", ["--algo", "crossq", "--max_seconds", "60", "--lr", "3e-4"])
    assert calls[3] == ("crossq", mujoco.ZOO_CROSSQ_MUJOCO)
    assert recs[3]["error"] == "sb3_contrib is not installed (requirements-bench.txt)"


def test_rl_zoo_crossq_mujoco_settings_are_sb3_contrib_arguments():
    """The peer's settings are constructor arguments of sb3-contrib's CrossQ, as rl-zoo gives them
    (read from its source: importing it brings torch, which takes seconds)."""
    import ast
    import importlib.util
    import pathlib

    spec = importlib.util.find_spec("sb3_contrib")
    if spec is None:
        pytest.skip("sb3-contrib is not installed (requirements-bench.txt)")
    tree = ast.parse((pathlib.Path(spec.origin).parent / "crossq" / "crossq.py").read_text())
    init = next(node for cls in tree.body if isinstance(cls, ast.ClassDef) and cls.name == "CrossQ"
                for node in cls.body if isinstance(node, ast.FunctionDef) and node.name == "__init__")
    assert set(mujoco.ZOO_CROSSQ_MUJOCO) <= {a.arg for a in init.args.args}


def test_the_recorded_sb3_contrib_runs_ran_with_the_settings_the_tables_name():
    """The MuJoCo table labels sb3-contrib's rows with ZOO_CROSSQ_MUJOCO: every recorded run of
    that side ran with exactly those arguments (its command carries them)."""
    import os
    import shlex

    path = os.path.join(os.path.dirname(mujoco.__file__), "results", "mujoco", "results.jsonl")
    peers = [json.loads(line) for line in open(path) if '"side": "sb3-crossq"' in line]
    assert peers
    for row in peers:
        words = shlex.split(row["command"])
        curve = json.loads(words[words.index("--curve") + 1])
        assert curve["algo"] == "crossq" and curve["kwargs"] == mujoco.ZOO_CROSSQ_MUJOCO, row["command"]


def test_a_her_sitting_times_each_side_to_the_success_level_and_reports_it(tmp_path, monkeypatch):
    from benchmarks import her

    def curve(successes):
        return [{"env_steps": 1000 * (i + 1), "updates": 900 * i, "wall_s": 10.0 * (i + 1), "return": -40.0,
                 "success": s} for i, s in enumerate(successes)]

    calls = []

    def fake_dsac(flags, env, seed, budget, eval_every, timeout=None, as_typed=False):
        calls.append(("dsac", flags, env, budget))
        return {"points": curve([0.0, 0.5, 0.9, 0.8]), "error": None, "command": ["python", "launch.py", *flags]}

    def fake_module(module, args, timeout=None):
        calls.append((module, json.loads(args[1])))
        return None  # SB3 is not installed

    monkeypatch.setattr(her.harness, "run_dsac", fake_dsac)
    monkeypatch.setattr(her.harness, "run_module", fake_module)
    monkeypatch.setattr(learner_update, "machine_pace", lambda: (321.0, "python -m benchmarks learner-update"))
    out = tmp_path / "her.jsonl"
    assert her.main(["--seeds", "0", "1", "--minutes", "2", "--out", str(out)]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["side"], r["seed"]) for r in recs] == [("dsac", 0), ("sb3", 0), ("dsac", 1), ("sb3", 1)]
    dsac_run = recs[0]
    assert (dsac_run["reached_s"], dsac_run["reached_env_steps"]) == (30.0, 3000)
    assert (dsac_run["final_success"], dsac_run["best_success"], dsac_run["pace_updates_per_s"]) == (0.8, 0.9, 321.0)
    assert calls[0][1][:4] == ["--algo", "sac", "--her", "--gamma"] and "--max_seconds" in calls[0][1]
    assert calls[0][2:] == ("gymnasium_robotics:FetchReach-v4", 20_000)
    assert calls[1][0] == "benchmarks.sb3_her" and calls[1][1]["kwargs"] == her.ZOO_HER
    assert recs[1]["reached_s"] is None and "not installed" in recs[1]["error"]
    text = her.report(str(out), figures="../figs/")
    assert "| FetchReach-v4 | dsac | 2 | 2 of 2 | 30 | 3,000 |" in text and "| sb3 | 2 | 0 of 2 | — |" in text
    assert "[FetchReach-v4](../figs/FetchReach-v4.png)" in text
    with open(out, "a") as f:  # seed 0 run again: another run, not a replacement
        f.write(json.dumps(recs[0]) + "\n")
    assert "| FetchReach-v4 | dsac | 3 | 3 of 3 | 30 | 3,000 |" in her.report(str(out))
    written = her.plot(str(out), str(tmp_path / "figs"))
    assert written == [str(tmp_path / "figs" / "FetchReach-v4.png")] and open(written[0], "rb").read(4) == b"\x89PNG"


def test_the_readme_headline_rows_hold_every_atari_and_stability_run():
    """The README's headline block (benchmarks/docs.py headline_table) comes from the result
    files: every Atari record's score at its budget and every stability run are counted."""
    import os

    from benchmarks import docs

    readme = open(os.path.join(docs.REPO_ROOT, "README.md")).read()
    block = readme.split("<!-- generated: headline -->", 1)[1].split("<!-- end generated: headline -->", 1)[0]
    atari = [json.loads(line) for line in open(os.path.join(docs.REPO_ROOT, docs.ATARI_RESULTS)) if line.strip()]
    for rec in atari:
        final = rec["scores"][format(rec["minutes"], "g")]["return"]
        assert f"{final:,.1f} (seed {rec['seed']})" in block, rec["command"]
    runs = [json.loads(line) for line in open(os.path.join(docs.REPO_ROOT, docs.STABILITY_RESULTS)) if line.strip()]
    for variant in ("serial", "w2"):
        group = [r for r in runs if r["settings"] == "defaults" and r["variant"] == variant]
        held = sum((r["final"] or 0) >= 475 for r in group)
        assert f"defaults, {variant}: does it hold what it learned? | final return ≥ 475 on {held} of {len(group)}" \
            in block


def test_the_guides_choice_table_marks_the_runs_of_an_envs_preset(tmp_path, monkeypatch):
    """Beside an algorithm's defaults, the "which algorithm" table shows the configuration that
    ran with the env's preset (its settings, no other flag typed): what `launch.py --env` gives.
    A run that typed more than the preset is not it."""
    monkeypatch.setattr(mujoco, "presets", lambda: {"Ant-v5": {"sac": {
        "set": {"lr": 0.0003}, "why": "-", "record": {"file": "-", "commit": "aaa", "seeds": [0, 1], "budget": "-"}}}})

    def run(seed, final, flags=(), **settings):
        return {**record(algo="sac", env="Ant-v5", seed=seed, final=final, flags=flags),
                "settings": {"algo": "sac", "lr": 0.001, "batch_size": 256, **settings}}

    path = write(tmp_path / "results.jsonl", [
        run(0, 20.0), run(0, 1300.0, ["--lr", "3e-4"], lr=0.0003), run(1, 1400.0, ["--lr", "3e-4"], lr=0.0003),
        run(2, 900.0, ["--lr", "3e-4", "--batch_size", "512"], lr=0.0003, batch_size=512)])
    row = next(line for line in mujoco.choice_table(path).splitlines() if line.startswith("| Ant-v5"))
    assert "[preset] 1,350 (1,300–1,400; 2, aaa)" in row and "| 20 (1 run, aaa)" in row and "900" not in row, row


def test_a_race_sitting_shows_every_run_of_each_side_and_its_median_against_a(tmp_path):
    from benchmarks.speed import races_markdown

    def report(runs, lunar=()):
        return {"solve": {"sac": {"runs": [{"seed": s, "solved": True, "wall_s": w} for s, w in runs]}},
                "lunar": {"dsac": [{"seed": s, "solved": ok, "wall_s": w} for s, w, ok in lunar]}}

    (tmp_path / "1-A-aaaaaaa.json").write_text(json.dumps(report([(0, 30.0), (1, 40.0)])))
    (tmp_path / "2-B-bbbbbbb.json").write_text(json.dumps(report([(0, 20.0), (1, 26.0)], [(0, 900.0, False)])))
    (tmp_path / "3-A-aaaaaaa.json").write_text(json.dumps(report([(0, 20.0)], [(0, 300.0, True), (1, None, False)])))
    (tmp_path / "README.md").write_text("not a report")
    table = races_markdown(str(tmp_path))
    assert "| SAC Pendulum-v1 to -200 | A, aaaaaaa | 0: 30; 1: 40; 0: 20 | 30.0 | 3 | 1.00x |" in table, table
    assert "| SAC Pendulum-v1 to -200 | B, bbbbbbb | 0: 20; 1: 26 | 23.0 | 2 | 0.77x |" in table, table
    # An unsolved run counts at the time it stopped, marked: it can only make its side slower.
    assert "| B, bbbbbbb | 0: 900 (not solved) | 900.0 | 1 | 3.00x |" in table, table
    # A run that ended before any evaluation is shown, outside the median and n.
    assert "| A, aaaaaaa | 0: 300; 1: no evaluation | 300.0 | 1 | 1.00x |" in table, table
    assert "CartPole" not in table  # a race no file ran has no row

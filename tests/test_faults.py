"""Fault tolerance: a role's process SIGKILLed mid-run is replaced and the run goes on; a run
whose updates turn non-finite stops with one line and keeps its last good weights.

Every test runs ``launch.py`` as a user does and finds the process to kill through the roles
themselves: each reports its host and pid, and the driver logs it ("placed <role> on <host>
(node <id>, pid <pid>)").
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import REPO_ROOT

from dsac.formats.inference import load_weights

# Small and fast: SAC on Pendulum with 2x64 networks reaches -400 in ~3,000-5,000 env steps;
# a fresh policy scores about -1,500. A budget (8,000, for a run with faults) rather than the
# threshold ends the run, so no kill comes too late to happen.
THRESHOLD = -400.0
RUN = [
    "--num_workers", "2", "--fcnet_hiddens", "64", "64", "--eval_every", "1000", "--eval_episodes", "5",
    "--total_env_steps", "8000", "--checkpoint_every", "2", "--log_every", "2", "--seed", "0", "--no-tensorboard",
]
EVAL = re.compile(r"eval at (\d+) env steps .*: return (-?[\d.]+|nan)")
CHECKPOINT = re.compile(r"checkpoint at ([\d,]+) env steps, ([\d,]+) updates")


class Run:
    """``launch.py`` in a subprocess, its output read line by line as it comes."""

    def __init__(self, out, *args, cwd=REPO_ROOT):
        self.out = out
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(REPO_ROOT, "launch.py"), *args, "--output_dir", str(out)],
            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, start_new_session=True,
        )
        self.lines: list[str] = []
        self.stderr_lines: list[str] = []
        # One reader per pipe (communicate() would race the stdout reader for lines).
        self.readers = [
            threading.Thread(target=self._read, args=(pipe, lines), daemon=True)
            for pipe, lines in ((self.proc.stdout, self.lines), (self.proc.stderr, self.stderr_lines))
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(pipe, lines):
        for line in pipe:
            lines.append(line.rstrip("\n"))

    def wait_for(self, predicate, start: int = 0, timeout=240.0):
        """The first output line from line ``start`` on for which ``predicate(line)`` is true."""
        deadline, seen = time.monotonic() + timeout, start
        while time.monotonic() < deadline:
            while seen < len(self.lines):
                line = self.lines[seen]
                seen += 1
                if predicate(line):
                    return line
            assert self.proc.poll() is None, "\n".join(self.lines[-40:])
            time.sleep(0.2)
        raise AssertionError("timed out; last output:\n" + "\n".join(self.lines[-40:]))

    def pid_of(self, role: str, start: int = 0) -> int:
        """The pid the role reported in its first placement line from line ``start`` on."""
        pattern = re.compile(rf"placed {role} on .*\(node \w+, pid (\d+)\)")
        return int(pattern.search(self.wait_for(pattern.search, start)).group(1))

    def evals(self) -> list[tuple[int, float]]:
        return [(int(m.group(1)), float(m.group(2))) for m in map(EVAL.search, self.lines) if m]

    def finish(self, timeout=300.0) -> int:
        self.proc.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(timeout=10)
        return self.proc.returncode

    @property
    def stderr(self) -> str:
        return "\n".join(self.stderr_lines)

    def summary(self) -> dict:
        return json.loads((self.out / "summary.json").read_text())


def checkpoint_with_updates_at_least(updates: int):
    def predicate(line):
        match = CHECKPOINT.search(line)
        return match is not None and int(match.group(2).replace(",", "")) >= updates
    return predicate


ROLES = ["rollout_worker_0", "parameter_server", "run_monitor", "replay_shard_0"]


@pytest.mark.slow
def test_killed_roles_are_replaced_the_learner_resumes_from_its_checkpoint_and_the_run_learns(tmp_path):
    """With --normalize_obs, the learner is killed once a checkpoint holds 1,000 updates: its
    replacement resumes from that checkpoint (statistics included), not from scratch. Then a
    rollout worker, the parameter server, the run monitor and a replay shard are killed in
    turn, each once the previous one's replacement is announced: every one comes back, and
    the run still learns."""
    run = Run(tmp_path / "run", *RUN, "--normalize_obs")  # the statistics go through every restart too
    try:
        pids = {role: run.pid_of(role) for role in ["learner", *ROLES]}
        # Killed as soon as a checkpoint holds 1,000 updates (about 2,000 env steps).
        line = run.wait_for(checkpoint_with_updates_at_least(1000))
        killed_at_line, killed_at_steps = len(run.lines), int(CHECKPOINT.search(line).group(1).replace(",", ""))
        os.kill(pids["learner"], signal.SIGKILL)
        assert run.pid_of("learner", start=killed_at_line) != pids["learner"]  # a new learner process
        seen = len(run.lines)
        for role in ROLES:
            os.kill(pids[role], signal.SIGKILL)
            run.wait_for(re.compile(rf"{role} .*died.*restart").search, start=seen)
            seen = len(run.lines)
        code = run.finish()
    finally:
        run.proc.kill()
    output = "\n".join(run.lines)
    assert code == 0, output[-4000:] + run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    # One line per fault: dsac's; Ray's own paragraph (ids, IP, port, exit detail) stays out of the console.
    assert "A worker died or was killed" not in output + run.stderr, output[-4000:]
    restart = re.search(r"learner died .*restart 1 .*resumes from the checkpoint at ([\d,]+) updates", output)
    assert restart, output[-4000:]
    checkpoint_updates = int(restart.group(1).replace(",", ""))
    assert checkpoint_updates >= 1000  # a recent checkpoint, not the start
    # The new learner went on from the checkpoint, not from scratch: its update count continues
    # from there, and its first evaluation is within noise of the last one before the kill.
    lines = [json.loads(x) for x in (run.out / "progress.jsonl").read_text().splitlines()]
    before = [x for x in lines if x["env_steps"] <= killed_at_steps][-1]
    after = next(x for x in lines if x["env_steps"] > killed_at_steps)
    assert after["updates"] >= checkpoint_updates, (before, after)
    assert after["eval_return_mean"] > before["eval_return_mean"] - 400, (before, after)
    summary = run.summary()
    assert summary["restarts"] == dict.fromkeys(["learner", *ROLES], 1) and summary["failure"] is None, summary
    assert summary["stop_reason"] == "total_env_steps", summary
    assert max(line["eval_return_mean"] for line in lines) >= THRESHOLD, lines
    payload = load_weights(str(run.out / "weights.pkl"))
    assert payload["version"] == summary["weights_version"] > 0
    # The observation statistics survive every restart: the restored learner took its
    # checkpoint's, and the restarted replay shard's earlier moments were kept, neither dropped
    # (a count far below the env steps) nor counted twice (near double). Ray retries the calls in
    # flight when it restarts a shard, so a chunk the old one had stored may be stored again.
    count = payload["weights"]["obs_norm/count"][0]
    assert 0.8 * summary["env_steps"] <= count <= 1.15 * summary["env_steps"], (count, summary["env_steps"])
    # The parameter server's versions carried on from before its restart.
    versions = [line["weights_version"] for line in lines]
    assert versions == sorted(versions), versions


NAN_MODULE = '''
import gymnasium as gym
import numpy as np


class NaNPendulum(gym.Wrapper):
    """Pendulum whose rewards turn NaN after a number of steps in each process."""

    steps = 0

    def __init__(self, after=800):
        super().__init__(gym.make("Pendulum-v1"))
        self.after = after

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        NaNPendulum.steps += 1
        return obs, (np.nan if NaNPendulum.steps > self.after else reward), terminated, truncated, info
'''


@pytest.mark.slow
def test_non_finite_updates_are_skipped_then_stop_the_run_with_good_weights(tmp_path):
    (tmp_path / "nan_envs.py").write_text(NAN_MODULE)
    run = Run(
        tmp_path / "run", "--env", "nan_envs:NaNPendulum", "--num_workers", "2", "--fcnet_hiddens", "32", "32",
        "--eval_every", "500", "--eval_episodes", "1", "--total_env_steps", "20000", "--max_nonfinite_updates", "20",
        "--no-tensorboard", cwd=tmp_path,
    )
    try:
        code = run.finish()
    finally:
        run.proc.kill()
    assert code == 1, "\n".join(run.lines[-40:]) + run.stderr
    # The last line (before it, stderr holds what Ray forwards from the workers' own stderr).
    error = run.stderr.strip().splitlines()[-1]
    assert "non-finite" in error and error.startswith("dsac: run failed") and "Traceback" not in run.stderr, run.stderr
    summary = run.summary()
    assert summary["skipped_updates"] >= 20 and summary["updates"] > 0
    weights = load_weights(str(run.out / "weights.pkl"))["weights"]
    assert all(np.all(np.isfinite(w)) for w in weights.values())


@pytest.mark.slow
def test_every_role_of_a_two_learner_run_survives_a_kill(tmp_path):
    """Learner 1 and then the gradient averager are SIGKILLed: the learner is restarted and the
    group re-forms from the survivor's state, Ray restarts the averager and the learners form
    their group again; the run trains on until it is stopped, with both replicas identical and
    an update count that never went back.

    CrossQ, whose state holds running statistics beside the weights and optimizers: each replica
    moves them from its own batch, and averaged with the gradients (and handed over through the
    re-forming) the replicas end identical in all three (SAC's replicas: tests/test_integration.py)."""
    run = Run(tmp_path / "run", "--algo", "crossq", "--num_workers", "2", "--num_learners", "2",
              "--fcnet_hiddens", "32", "32", "--critic_hiddens", "32", "32", "--learner_xla", "false",
              "--eval_every", "1000", "--eval_episodes", "2", "--total_env_steps", "50000", "--checkpoint_every", "2",
              "--log_every", "2", "--seed", "0", "--no-tensorboard")
    try:
        averager = run.pid_of("gradient_averager")
        learner_1 = run.pid_of("learner_1")
        line = run.wait_for(checkpoint_with_updates_at_least(200))
        killed_at_updates = int(CHECKPOINT.search(line).group(2).replace(",", ""))
        seen = len(run.lines)
        os.kill(learner_1, signal.SIGKILL)
        run.wait_for(re.compile(r"learner_1 died .*restart 1 .*rejoins the learner group").search, start=seen)
        run.pid_of("learner_1", start=seen)  # the replacement is up
        line = run.wait_for(checkpoint_with_updates_at_least(killed_at_updates + 100), start=seen)  # the group trains
        killed_at_updates = int(CHECKPOINT.search(line).group(2).replace(",", ""))
        seen = len(run.lines)
        os.kill(averager, signal.SIGKILL)
        run.wait_for(re.compile(r"gradient_averager died .*restart 1 .*form their group again").search, start=seen)
        run.wait_for(checkpoint_with_updates_at_least(killed_at_updates + 100), start=seen)
        # A graceful stop, as `kill <pid>` or `ray job stop` sends it (to the driver only: a
        # SIGTERM to the whole group would also stop the embedded Ray's daemons under it).
        signalled = time.time()
        run.proc.send_signal(signal.SIGTERM)
        code = run.finish()
    finally:
        run.proc.kill()
    output = "\n".join(run.lines)
    assert code == 143, output[-4000:] + run.stderr[-2000:]
    assert "Traceback" not in output + run.stderr, output[-4000:] + run.stderr[-2000:]
    # Every learner handed over: the final weights were written after the signal, within 10 s.
    assert 0 <= (run.out / "weights.pkl").stat().st_mtime - signalled < 10
    assert load_weights(str(run.out / "weights.pkl"))["version"] == run.summary()["weights_version"] > 0
    summary = run.summary()
    assert summary["restarts"] == {"learner_1": 1, "gradient_averager": 1}, summary
    assert summary["stop_reason"] == "sigterm" and summary["failure"] is None, summary
    learners = summary["learners"]
    assert learners["learner_0"]["weights_digest"] == learners["learner_1"]["weights_digest"], learners
    assert learners["learner_0"]["state_digest"] == learners["learner_1"]["state_digest"], learners
    assert learners["learner_0"]["updates"] == learners["learner_1"]["updates"] == summary["updates"], learners
    assert summary["updates"] >= killed_at_updates + 100
    updates = [json.loads(x)["updates"] for x in (run.out / "progress.jsonl").read_text().splitlines()]
    assert updates == sorted(updates), updates


# Pendulum whose evaluation episodes (a --seed 0 run's reset with seeds 100,000 + j,
# dsac.runtime.evaluation's offset; rollout workers' are drawn from 2^32) take 0.1 s a step: a 70-step
# evaluation plays for 7 s, longer than the run's --stop_timeout of 3 s.
SLOW_EVALUATION_MODULE = '''
import time

import gymnasium as gym


class SlowToEvaluate(gym.Wrapper):
    def __init__(self):
        super().__init__(gym.make("Pendulum-v1", max_episode_steps=70))
        self.slow = False

    def reset(self, *, seed=None, options=None):
        self.slow = seed is not None and 100_000 <= seed < 100_010
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        if self.slow:
            time.sleep(0.1)
        return self.env.step(action)
'''


@pytest.mark.slow
def test_a_stop_keeps_a_final_evaluation_longer_than_the_shutdown_timeout(tmp_path):
    """The evaluator says every few seconds that it is still playing; the stop waits for it
    rather than cancelling it after --stop_timeout, so the final weights' evaluation reaches
    progress.jsonl with its episode lengths."""
    (tmp_path / "slow_eval_envs.py").write_text(SLOW_EVALUATION_MODULE)
    run = Run(tmp_path / "run", "--env", "slow_eval_envs:SlowToEvaluate", "--num_workers", "1",
              "--fcnet_hiddens", "32", "32", "--total_env_steps", "600", "--learning_starts", "200",
              "--start_steps", "200", "--eval_every", "100000", "--eval_episodes", "1", "--no-tensorboard",
              "--stop_timeout", "3", cwd=tmp_path)
    assert run.finish(timeout=400) == 0, run.stderr[-3000:]
    output = "\n".join(run.lines + run.stderr_lines)
    assert "waiting for the evaluator's final evaluation" in output, output[-3000:]
    assert "did not stop" not in output, output[-3000:]
    lines = [json.loads(line) for line in (run.out / "progress.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["eval_length_mean"] == 70 and lines[0]["eval_truncated"] == 1, lines
    assert run.summary()["stop_reason"] == "total_env_steps"

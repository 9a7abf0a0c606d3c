"""Devices: ``dsac-doctor`` says what a run will find, and a learner that Ray gives a GPU
TensorFlow cannot see says so in one warning line naming the fix, then learns on the CPU.

No GPU is lent to this project: the GPU is faked the way autoscalers give a node resources it
does not detect (``RAY_OVERRIDE_RESOURCES``), so Ray schedules the learner with
``num_gpus=1`` and sets its ``CUDA_VISIBLE_DEVICES``, and TensorFlow finds no device there."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

FAKE_GPU = {"RAY_OVERRIDE_RESOURCES": json.dumps({"GPU": 1})}


def without_hidden_gpus() -> dict:
    """This environment without conftest's empty CUDA_VISIBLE_DEVICES, which Ray refuses beside a GPU."""
    return {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}


def doctor(*args, env=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "dsac.doctor", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_doctor_on_this_machine_finds_a_cpu_learner_and_no_problem_a_run_needs():
    result = doctor("--json")
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    found = json.loads(result.stdout)
    assert found["learner_device"] == "CPU"
    assert found["ray_gpus"] == 0 and found["tf_gpus"] == []
    assert found["ok"] is True and isinstance(found["problems"], list)
    assert found["cpus"] >= 1 and found["versions"]["tensorflow"] and found["versions"]["ray"]
    text = doctor()
    assert text.returncode == 0 and "learner device: CPU" in text.stdout
    assert len(text.stdout.splitlines()) <= 8 and "Traceback" not in text.stderr


def test_doctor_names_a_gpu_tensorflow_cannot_use_and_its_fix():
    result = doctor("--json", env=FAKE_GPU)
    assert result.returncode == 0, result.stderr[-2000:]  # a default run still works, on the CPU
    found = json.loads(result.stdout)
    assert found["ray_gpus"] == 1 and found["tf_gpus"] == [] and found["learner_device"] == "CPU"
    assert any("TensorFlow sees none" in p and "dsac[gpu]" in p for p in found["problems"]), found["problems"]


@pytest.mark.slow
def test_a_learner_given_a_gpu_tensorflow_cannot_see_warns_once_and_learns_on_the_cpu(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--num_workers", "1", "--total_env_steps", "600",
         "--eval_every", "600", "--eval_episodes", "1", "--fcnet_hiddens", "16", "--learning_starts", "200",
         "--start_steps", "200", "--seed", "0", "--output_dir", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env={**without_hidden_gpus(), **FAKE_GPU})
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-3000:]
    assert "1 GPU" in log.split("placement plan:", 1)[1].splitlines()[0]  # the plan gave the learner the GPU
    warnings = [line for line in log.splitlines() if "TensorFlow sees none" in line]
    assert len(warnings) == 1 and "pip install 'dsac[gpu]'" in warnings[0], warnings
    assert "using CPU" in log  # placed with a GPU, learning on the CPU
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failure"] is None and summary["updates"] > 0


def test_a_gpu_tensorflow_sees_is_named_with_its_memory(tmp_path, monkeypatch):
    """The GPU path's description, on what can be faked without a GPU: TensorFlow's device list
    (a stand-in with TF's call names) and the driver's ``nvidia-smi`` (a script on PATH)."""
    from types import SimpleNamespace

    from dsac.runtime.tf_setup import learner_device

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n[ \"$4\" = \"GPU-abc\" ] && echo 22731 || exit 6\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")  # Ray may name the GPU it gives by UUID
    gpu = SimpleNamespace(name="/physical_device:GPU:0", device_type="GPU")
    tf = SimpleNamespace(
        config=SimpleNamespace(
            list_physical_devices=lambda kind: [gpu] if kind == "GPU" else [],
            experimental=SimpleNamespace(get_device_details=lambda device: {"device_name": "NVIDIA A10G"})),
        test=SimpleNamespace(is_built_with_cuda=lambda: True))
    assert learner_device(tf, 1.0) == ("GPU (NVIDIA A10G, 22,731 MiB)", None)
    assert learner_device(tf, 0.0) == ("CPU", None)  # not given one by Ray: hidden, not used
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # the driver does not answer for it: no memory figure
    assert learner_device(tf, 1.0) == ("GPU (NVIDIA A10G)", None)
    tf.config.list_physical_devices = lambda kind: []
    device, warning = learner_device(tf, 1.0)
    assert device == "CPU" and "TensorFlow sees none" in warning and "dsac[gpu]" in warning


def test_the_serial_runner_names_its_learners_device_without_a_warning(tmp_path, capfd, caplog):
    from conftest import launch_here

    run = launch_here(["--local", "--total_env_steps", "300", "--learning_starts", "200", "--start_steps", "200",
                       "--eval_every", "300", "--eval_episodes", "1", "--fcnet_hiddens", "16",
                       "--output_dir", tmp_path / "run"], capfd, caplog)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "learner on CPU, " in run.stdout and "TensorFlow sees none" not in run.stdout + run.stderr

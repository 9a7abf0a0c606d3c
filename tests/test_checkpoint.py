"""Checkpoints of the full training state, and resuming a run from one."""

import json
import os
import shutil

import gymnasium as gym
import numpy as np
import pytest
from conftest import PENDULUM_RUN_STEPS

from dsac.config import Config
from dsac.envs.make import describe_space
from dsac.formats.checkpoints import read_checkpoint, write_checkpoint
from dsac.replay.buffer import PrioritizedReplayStorage, ReplayStorage, field_specs
from dsac.runtime.build import make_learner
from dsac.runtime.learning import UpdateLoop
from dsac.runtime.preparation import resume_config
from dsac.runtime.runner import run

RNG = np.random.default_rng(0)


def batch_for(env, n=16):
    obs = RNG.normal(size=(n, *env.observation_space.shape)).astype(np.float32)
    actions = np.stack([env.action_space.sample() for _ in range(n)])
    return {"obs": obs, "action": actions, "reward": RNG.normal(size=n).astype(np.float32),
            "next_obs": obs[::-1].copy(), "terminated": np.zeros(n, np.float32),
            "discount": np.full(n, 0.99, np.float32)}


@pytest.mark.parametrize("algo, env_id", [("sac", "Pendulum-v1"), ("dqn", "CartPole-v1"), ("crossq", "Pendulum-v1")])
def test_full_state_round_trip_continues_training_identically(algo, env_id, tmp_path):
    env = gym.make(env_id)
    config = Config(algo=algo, env=env_id, fcnet_hiddens=[16]).validate()
    a = make_learner(config, env.observation_space, env.action_space, 0)
    loop = UpdateLoop(a, config.push_every, config.max_nonfinite_updates)
    for _ in range(3):
        loop.step({key: value[None] for key, value in batch_for(env).items()})
    state = loop.state()
    assert int(state["updates"]) == 3 and any("optimizer" in k for k in state)
    payload = {"algo": algo, "env": env_id, "observation_space": describe_space(env.observation_space),
               "action_space": describe_space(env.action_space), "weights": a.get_weights()}
    write_checkpoint(str(tmp_path), state, {"env_steps": 10, "updates": 3, "version": 1}, payload)
    checkpoint = read_checkpoint(str(tmp_path))
    loaded = checkpoint["state"]
    assert set(checkpoint["weights"]) == set(a.get_weights())  # the acting weights, checked like any weights file
    b = make_learner(config, env.observation_space, env.action_space, 9)
    resumed = UpdateLoop(b, config.push_every, config.max_nonfinite_updates)
    resumed.set_state(loaded)
    for name, value in a.get_state().items():
        np.testing.assert_array_equal(b.get_state()[name], value)  # targets and optimizer included
    assert resumed.updates == 3


@pytest.mark.parametrize("storage_cls", [ReplayStorage, PrioritizedReplayStorage])
def test_replay_state_round_trip(storage_cls):
    specs = field_specs((3,), np.float32, (1,), np.float32)
    src = storage_cls(specs, capacity=8, seed=1)
    for start in (0, 5):  # 10 transitions into 8 slots: wrapped
        n = 5
        i = np.arange(start, start + n, dtype=np.float32)
        src.add({"obs": np.repeat(i[:, None], 3, 1), "action": i[:, None], "reward": i,
                 "next_obs": np.repeat(i[:, None], 3, 1), "terminated": np.zeros(n, np.float32),
                 "discount": np.ones(n, np.float32)})
    src.sample(4, 2)
    dst = storage_cls(specs, capacity=8, seed=2)
    dst.load_state_dict(src.state_dict())
    assert (dst.size, dst.added, dst.next_index, dst.sampled_batches) == (8, 10, 2, 2)
    np.testing.assert_array_equal(dst.data["reward"], src.data["reward"])
    # Same RNG state, so the same batch.
    np.testing.assert_array_equal(dst.sample(4, 3).batches["reward"], src.sample(4, 3).batches["reward"])


def test_resume_carries_counters_and_learning_on(trained_pendulum_run, tmp_path):
    """A copy of the trained run (conftest), resumed for 2,000 env steps more."""
    _, first, trained = trained_pendulum_run
    run_dir = str(tmp_path / "run")
    shutil.copytree(trained, run_dir)
    before = [json.loads(x) for x in open(f"{run_dir}/progress.jsonl")]
    meta = read_checkpoint(run_dir)["meta"]
    assert meta["env_steps"] == first["env_steps"] == PENDULUM_RUN_STEPS and meta["updates"] == first["updates"]
    second = run(resume_config(run_dir, {"total_env_steps": PENDULUM_RUN_STEPS + 2_000}).validate())
    after = [json.loads(x) for x in open(f"{run_dir}/progress.jsonl")]
    assert after[: len(before)] == before  # appended, not rewritten
    resumed = after[len(before):]
    assert resumed[0]["env_steps"] >= PENDULUM_RUN_STEPS and resumed[0]["updates"] >= first["updates"]
    assert resumed[0]["weights_version"] > before[-1]["weights_version"]
    assert resumed[0]["wall_s"] > before[-1]["wall_s"]
    # Nothing learned is lost: the evaluations after resuming are no worse than the last one
    # before, up to noise (one of ten episodes that fails to swing up costs ~100; a learner
    # starting over scores about -1200 to -1500 at both). Better is fine: training went on.
    after_resume = [row["eval_return_mean"] for row in resumed]
    assert (len(after_resume) >= 2
            and max(after_resume) >= before[-1]["eval_return_mean"] - 150), (before[-1], after_resume)
    assert second["env_steps"] == PENDULUM_RUN_STEPS + 2_000 and second["updates"] > first["updates"] + 1_500


def forged_npz(declared: int, stored: bool = True, compressed: int | None = None, name: str = "updates.npy") -> bytes:
    """An .npz of one float32 member whose npy header and zip sizes declare ``declared`` bytes
    (``compressed``: the compressed length its directory claims, default ``declared``) while
    the file holds its 128-byte header only."""
    import io
    import struct
    import zipfile

    header = io.BytesIO()
    count = (declared - 128) // 4
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (count,)})
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, header.getvalue())
    data = bytearray(out.getvalue())
    entry = data.index(b"PK\x01\x02")  # the central directory's entry: what zipfile trusts
    struct.pack_into("<II", data, entry + 20, declared if compressed is None else compressed, 128 + 4 * count)
    return bytes(data)


# A program of the batch: lower the address space to what this process maps plus 96 MiB, then
# read an honest .npz (deflated zeros) declaring 192 MiB: the budget must see the limit.
READ_UNDER_LIMIT = """
import resource, sys
import psutil
from dsac.errors import DsacError
from dsac.formats.checkpoints import read_npz
vms = psutil.Process().memory_info().vms
resource.setrlimit(resource.RLIMIT_AS, (vms + 96 * 2**20, resource.getrlimit(resource.RLIMIT_AS)[1]))
try:
    read_npz(sys.argv[1], "checkpoint/state.npz")
except DsacError as exc:
    print(f"dsac: error: {exc}", file=sys.stderr)
    sys.exit(2)
"""
SET_ADDRESS_SPACE = """
import resource
resource.setrlimit(resource.RLIMIT_AS, (4_000_000 * 1024, resource.getrlimit(resource.RLIMIT_AS)[1]))
"""


def test_a_checkpoint_whose_zip_sizes_lie_is_refused_in_one_line_under_ulimit(tmp_path):
    """The sizes a checkpoint's zip directory states are checked against the file itself, and
    the memory budget against the address-space limit, before anything is allocated. In one
    process under ``ulimit -v 4000000``, ``launch.py --resume`` of: the issue's state.npz (a
    stored member claiming 4.2 GB in a 250-byte file), a deflated member claiming 4.1 MB
    compressed (within deflate's ratio of its 4.2 GB), a stored member longer than its stored
    bytes, and a replay snapshot claiming 4.2 GB in a run whose own config.json says
    buffer_size 10**12 (a record never bounds its own checkpoint): each one line, exit 2, all
    within 40 s. Then an honest file of zeros declaring 192 MiB under 96 MiB of address space
    to spare: refused as more than the machine can load (it was a MemoryError traceback)."""
    import shutil
    import time
    import zipfile

    from conftest import REPO_ROOT, run_in_one_process

    golden = os.path.join(REPO_ROOT, "tests", "data", "golden", "sac_pendulum")
    cases = {
        "stored_4g": ("state.npz", forged_npz(4_200_000_128), "claim 4,200,000,128 compressed bytes, more than the "
                                                                "file's"),
        "deflated_4g": ("state.npz", forged_npz(4_200_000_128, stored=False, compressed=4_100_000),
                        "claim 4,100,000 compressed bytes, more than the file's"),
        "stored_longer": ("state.npz", forged_npz(192, compressed=128), "is stored, yet declares 192 bytes from 128"),
        "replay_4g": ("replay_0.npz", forged_npz(4_200_000_128, name="data/obs.npy"),
                      "replay_0.npz: its members claim 4,200,000,128 compressed bytes"),
    }
    (tmp_path / "limit.py").write_text(SET_ADDRESS_SPACE)
    programs = [{"program": str(tmp_path / "limit.py"), "args": []}]
    for case, (name, content, _) in cases.items():
        run = tmp_path / case
        shutil.copytree(golden, run)
        (run / "checkpoint" / name).write_bytes(content)
        if name.startswith("replay"):
            config = json.loads((run / "config.json").read_text())
            (run / "config.json").write_text(json.dumps({**config, "buffer_size": 10**12}))
        programs.append({"program": os.path.join(REPO_ROOT, "launch.py"), "args": ["--resume", str(run), "--local",
                                                                                   "--total_env_steps", "400"]})
    zeros = tmp_path / "zeros.npz"
    with zipfile.ZipFile(zeros, "w", zipfile.ZIP_DEFLATED) as archive, archive.open("x.npy", "w",
                                                                                    force_zip64=True) as member:
        np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": (48 * 2**20,)})
        for _ in range(192):
            member.write(bytes(2**20))
    (tmp_path / "read.py").write_text(READ_UNDER_LIMIT)
    programs.append({"program": str(tmp_path / "read.py"), "args": [str(zeros)]})
    (tmp_path / "batch").mkdir()
    began = time.monotonic()
    _, *resumed, honest = run_in_one_process(programs, tmp_path / "batch", timeout=120)
    assert time.monotonic() - began < 40
    for (case, (_, _, fact)), result in zip(cases.items(), resumed, strict=True):
        lines = result.stderr.strip().splitlines()
        where = f"{case}: exit {result.returncode}, {result.stderr[-1500:]!r}"
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("dsac: error: --resume "), where
        assert fact in lines[0], where
    lines = honest.stderr.strip().splitlines()
    assert honest.returncode == 2 and len(lines) == 1, honest.stderr[-1500:]
    assert "needs 192 MiB, more than this machine can load safely" in lines[0], lines

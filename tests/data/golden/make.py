"""How the golden files beside this script were made: short serial runs (``launch.py --local``,
no Ray) with tiny networks, whose weights files, checkpoints and ``config.json`` are kept as
dsac wrote them. tests/test_golden_files.py loads them with today's loaders, so a change to a
format's reader that would refuse a file dsac wrote shows there.

    python tests/data/golden/make.py          # rewrites the directories beside it

Run once; the files are committed. Re-running writes new files (the runs are seeded, but the
bytes of a network's weights are not promised to repeat across TensorFlow versions).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

SHORT = ["--local", "--seed", "0", "--total_env_steps", "300", "--learning_starts", "100", "--start_steps", "100",
         "--batch_size", "16", "--buffer_size", "1000", "--eval_every", "300", "--eval_episodes", "1",
         "--tensorboard", "false"]

# name -> the flags of its run; what is kept of each: KEEP.
RUNS = {
    # SAC on a vector observation, its checkpoint with the replay (compressed .npz members)
    "sac_pendulum": ["--algo", "sac", "--env", "Pendulum-v1", "--fcnet_hiddens", "8", "8", "--checkpoint_replay"],
    # DQN with dueling heads and C51 atoms, its checkpoint without replay
    "dqn_c51_cartpole": ["--algo", "dqn", "--env", "CartPole-v1", "--fcnet_hiddens", "8", "8", "--dueling",
                         "--num_atoms", "11", "--v_min", "-10", "--v_max", "10"],
    # plain DQN (no dueling) reading an image observation through a small conv encoder
    "dqn_conv_catch": ["--algo", "dqn", "--env", "examples.catch:Catch", "--fcnet_hiddens", "8", "--no-dueling",
                       "--conv_filters", "[[4, 3, 2]]"],
}
KEEP = ("weights.pkl", "config.json", "checkpoint")


def main() -> None:
    """Run each of :data:`RUNS` in a temp dir and copy what :data:`KEEP` names beside this script."""
    env = {**os.environ, "PYTHONPATH": REPO_ROOT, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in RUNS.items():
            out = os.path.join(tmp, name)
            subprocess.run([sys.executable, os.path.join(REPO_ROOT, "launch.py"), *SHORT, *flags, "--output_dir", out],
                           check=True, cwd=REPO_ROOT, env=env)
            target = os.path.join(HERE, name)
            shutil.rmtree(target, ignore_errors=True)
            os.makedirs(target)
            for item in KEEP:
                source = os.path.join(out, item)
                if os.path.isdir(source):
                    shutil.copytree(source, os.path.join(target, item))
                elif os.path.exists(source):
                    shutil.copy2(source, os.path.join(target, item))


if __name__ == "__main__":
    main()

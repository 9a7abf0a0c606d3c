"""Atari on this machine: the games table, and the Atari part of ``benchmarks/speed.py --atari``.

    python -m benchmarks atari --games Pong Breakout Qbert Freeway --minutes 60   # the games table
    python -m benchmarks atari --games Pong --minutes 60                         # the Pong hour
    python -m benchmarks atari --report                                          # the table of --out
    python -m benchmarks speed --atari                  # the costs below, with the 60-minute Pong run
    python -m benchmarks speed --atari --pong_minutes 0 # the costs only (~3 minutes)

The games table: each game runs ``launch.py --algo dqn --env ALE/<Game>-v5 --num_workers W
--max_seconds 60*minutes --seed S`` with the Atari defaults, one run at a time, and its
evaluations (5 whole games, FIRE at each life's start, the game's real score) are read at 15 /
30 / 60 minutes from process start and at 100k agent steps (400k frames: the Atari 100k
benchmark's budget, where published figures exist at that number of frames). One JSON line per
run in ``--out`` (command, commit, date, machine, scores, the curve); ``--report`` prints the
table with random play, human play and the published figures (:data:`PUBLISHED`) beside it.

Measures, for ALE/Pong-v5 with dsac's Atari preprocessing (84x84 grayscale, 4 stacked frames,
frame skip 4):
  collection    frames/s (env steps x 4) landing in a ReplayBuffer from W rollout workers, learner
                idle, acting with the numpy Nature encoder
  acting        the numpy Q-network's cost per batch of 1, 4 and 16 observations
  learner       DQN updates/s with the Nature encoder on CPU, batch 32 (and 64), on batches held
                in the process (the learner's own TensorFlow threads)
  replay        bytes per transition as stored (frame by frame) and as stacks; sampled batches/s
                of 32 and 256 with stacks rebuilt
  pong          a learning run with the product's Atari defaults (launch.py --algo dqn --env
                ALE/Pong-v5 --num_workers W --max_seconds 60*minutes --seed 0): the evaluation score
                at 15, 30 and 60 minutes and the learning-curve PNG (dsac.plot)
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from benchmarks import harness  # noqa: E402

ENV = "ALE/Pong-v5"


GAMES_MARKS_MIN = (15, 30, 60)
ATARI_100K_STEPS = 100_000
# Published scores per game (absent: not published for that game). random, human: as the
# Atari 100k papers use them; der_100k (data-efficient Rainbow, van Hasselt et al. 2019) and
# drq_eps_100k (DrQ(ε), Agarwal et al. 2021, mean of 100 runs) after 100k agent steps (400k
# frames); zoo_dqn_10m: rl-zoo's DQN after 10M agent steps (one agent); nature_dqn: Mnih et al.
# 2015 after 50M agent steps (200M frames). Sources in PUBLISHED_SOURCES.
PUBLISHED: dict[str, dict[str, float]] = {
    "Pong": {"random": -20.7, "human": 14.6, "der_100k": -19.3, "drq_eps_100k": -9.1, "zoo_dqn_10m": 20.6,
             "nature_dqn": 18.9},
    "Breakout": {"random": 1.7, "human": 30.5, "der_100k": 1.9, "drq_eps_100k": 19.8, "zoo_dqn_10m": 358.3,
                 "nature_dqn": 401.2},
    "Qbert": {"random": 163.9, "human": 13_455.0, "der_100k": 1_152.9, "drq_eps_100k": 1_810.7,
              "zoo_dqn_10m": 9_496.8, "nature_dqn": 10_596.0},
    "Freeway": {"random": 0.0, "human": 29.6, "der_100k": 27.9, "drq_eps_100k": 20.3, "nature_dqn": 30.3},
    "Seaquest": {"random": 68.4, "human": 42_054.7, "der_100k": 354.1, "drq_eps_100k": 352.3, "zoo_dqn_10m": 2_000.3,
                 "nature_dqn": 5_286.0},
    "SpaceInvaders": {"random": 148.0, "human": 1_668.7, "zoo_dqn_10m": 622.7, "nature_dqn": 1_976.0},
}
PUBLISHED_SOURCES = (
    "Sources: random and human: google/dopamine `dopamine/labs/atari_100k/normalization_utils.py`; DER: the "
    "paper's table as mila-iqia/spr `src/rlpyt_utils.py` (`atari_der_scores`) holds it; DrQ(ε): the mean of the "
    "100 runs per game of rliable's Atari 100k data (as eloialonso/iris `results/data/DrQ(eps).json` holds it); "
    "rl-zoo DQN: DLR-RM/rl-baselines3-zoo `benchmark.md` (NoFrameskip-v4, 10M steps, one agent); Nature DQN: "
    "Mnih et al. 2015 (seungjaeryanlee/rldb `paper__dqn`, no-op starts). dsac plays ALE v5 (sticky actions 0.25, "
    "full action set off), the others NoFrameskip-v4 or v5 as their papers state."
)


def game_record(game: str, minutes: float, workers: int, seed: int, png: str | None = None,
                extra: list[str] | None = None) -> dict:
    """One run of ALE/``game``-v5 with the Atari defaults for ``minutes``: its result record
    (and its learning curve drawn into ``png``, if given)."""
    env = f"ALE/{game}-v5"
    flags = ["--algo", "dqn", "--num_workers", str(workers), "--max_seconds", f"{60 * minutes:g}", *(extra or [])]

    def plot(output_dir: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
        subprocess.run([sys.executable, "-m", "dsac.plot", output_dir, "--out", png], cwd=REPO_ROOT,
                       check=False, capture_output=True)

    run = harness.run_dsac(flags, env, seed, 10_000_000, None, timeout=60 * minutes + 3600, as_typed=True,
                           use_output=plot if png else None)
    points = run["points"]
    at_100k = harness.return_at(points, ATARI_100K_STEPS) if points and points[-1]["env_steps"] >= ATARI_100K_STEPS \
        else None
    return {
        "suite": "atari", "env": env, "game": game, "seed": seed, "workers": workers, "minutes": minutes,
        "flags": list(extra or []),
        **harness.provenance(run["command"]),
        "scores": harness.scores_at_marks(points, sorted({*(m for m in GAMES_MARKS_MIN if m < minutes), minutes}),
                                          minutes),
        "at_100k_steps": at_100k, "best": max((p["return"] for p in points), default=None),
        # [env steps, return, seconds from process start, updates] of each evaluation
        "curve": [[p["env_steps"], round(p["return"], 1), p["wall_s"], p.get("updates")] for p in points],
        "curve_png": png if png and os.path.exists(png) else None, "error": run["error"],
    }


def games_report(path: str) -> str:
    """The games table of every record in ``path`` (a later run of a game, budget and seed is
    another row, not a replacement)."""
    latest = harness.every_run(
        path, lambda rec: ((rec["game"], rec["minutes"], rec["seed"], " ".join(rec.get("flags", []))), rec))
    marks = sorted({float(m) for rec in latest.values() for m in rec["scores"]})

    def ref(game, key):
        value = PUBLISHED.get(game, {}).get(key)
        return "—" if value is None else f"{value:,.1f}"

    lines = ["Evaluation score (mean of 5 whole games) at each mark, minutes from process start; agent steps "
             "in brackets (frames = 4 × agent steps).", "",
             "| game | run | " + " | ".join(f"{m:g} min" for m in marks) + " | at 100k steps | best | random "
             "| DER 100k | DrQ(ε) 100k | rl-zoo DQN 10M | Nature DQN 50M | human | commit |",
             "|---|---|" + "---|" * len(marks) + "---|---|---|---|---|---|---|---|---|"]
    for (game, minutes, seed, flags, _), rec in sorted(latest.items()):
        cells = []
        for m in marks:
            sc = rec["scores"].get(f"{m:g}")
            cells.append(f"{sc['return']:,.1f} ({sc['env_steps'] / 1000:,.0f}k, {sc['updates'] or 0:,} upd.)"
                         if sc else "—")
        at = "—" if rec["at_100k_steps"] is None else f"{rec['at_100k_steps']:,.1f}"
        best = "—" if rec["best"] is None else f"{rec['best']:,.1f}"
        error = f" ({rec['error']})" if rec.get("error") else ""
        run = f"{minutes:g} min, {rec['workers']} workers, seed {seed}{' ' + flags if flags else ''}{error}"
        lines.append(f"| {game} | {run} | " + " | ".join(cells)
                     + f" | {at} | {best} | {ref(game, 'random')} | {ref(game, 'der_100k')} | "
                     f"{ref(game, 'drq_eps_100k')} | {ref(game, 'zoo_dqn_10m')} | {ref(game, 'nature_dqn')} "
                     f"| {ref(game, 'human')} | {rec['commit']} |")
    lines += ["", "Commands: " + "; ".join(sorted({f"`{rec['command']}`" for rec in latest.values()}))]
    if PUBLISHED_SOURCES:
        lines += ["", PUBLISHED_SOURCES]
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", nargs="+", default=["Pong", "Breakout", "Qbert", "Freeway"],
                        help="ALE game names (ALE/<Game>-v5)")
    parser.add_argument("--workers", type=int, default=2, help="rollout workers (--num_workers)")
    parser.add_argument("--flags", default="", help="extra launch.py flags, a candidate change (e.g. "
                        "--flags='--conv_filters [[32,5,5],[64,5,5]] --fcnet_hiddens 256'); the table shows them")
    harness.add_seed_flags(parser, "0")
    harness.add_results_flags(parser, "runs/atari.jsonl", "benchmarks/results/atari/results.jsonl", minutes=60.0)
    args = parser.parse_args(argv)
    if not args.report:
        harness.check_minutes(parser, args.minutes)
        from dsac.envs.make import make_env
        from dsac.errors import DsacError

        for game in args.games:  # every name checked before the first hour is spent
            try:
                make_env(f"ALE/{game}-v5").close()
            except DsacError as exc:
                parser.error(str(exc))
        for game in args.games:
            for seed in harness.seeds_of(args, [0]):
                tag = "-" + hashlib.sha1(args.flags.encode()).hexdigest()[:8] if args.flags else ""
                png = os.path.join(os.path.dirname(os.path.abspath(args.out)),
                                   f"{game}-seed{seed}-{args.minutes:g}min{tag}.png")
                rec = game_record(game, args.minutes, args.workers, seed, png=png, extra=shlex.split(args.flags))
                harness.append_record(args.out, rec)
                print(f"{game} seed {seed}: {rec['scores']} at 100k steps {rec['at_100k_steps']} error {rec['error']}",
                      file=sys.stderr, flush=True)
    return harness.print_report(parser, args.out, games_report)


def _policy(learner: bool, batch_size: int = 32):
    """DQN's learner (``learner``) or acting policy on the benchmark's game, and its config."""
    from dsac.config import Config
    from dsac.envs.make import make_env

    config = Config(algo="dqn", env=ENV, batch_size=batch_size).validate()
    env = make_env(ENV)
    if learner:
        from dsac.runtime.build import make_learner

        return make_learner(config, env.observation_space, env.action_space), config
    from dsac.algorithms.dqn.policy import DQNPolicy

    return DQNPolicy(env.observation_space, env.action_space, config), config


def acting_ms(repeats: int = 20) -> dict:
    """Milliseconds per numpy forward pass of the Q-network on batches of 1, 4, 16 frames stacks."""
    learner, _ = _policy(True)
    actor, _ = _policy(False)
    actor.set_weights(learner.get_weights())
    rng = np.random.default_rng(0)
    out = {}
    for n in (1, 4, 16):
        obs = rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8)
        actor.compute_actions(obs)
        started = time.perf_counter()
        for _ in range(repeats):
            actor.compute_actions(obs)
        out[n] = 1000 * (time.perf_counter() - started) / repeats
    return out


def learner_rate(seconds: float, batch_size: int) -> float:
    """DQN updates/s (Nature encoder, 512 head) on uint8 batches already in this process."""
    from dsac.runtime.tf_setup import configure_tensorflow

    configure_tensorflow(0, 2)  # a learner's threads on this machine (at most its cores)
    policy, config = _policy(True, batch_size)
    rng = np.random.default_rng(0)
    n = batch_size
    batches = [{
        "obs": rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8), "action": rng.integers(0, 6, n),
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8),
        "terminated": np.zeros(n, np.float32), "discount": np.full(n, 0.99 ** 3, np.float32),
        "weights": np.ones(n, np.float32),
    } for _ in range(config.batches_per_sample)]
    return harness.updates_per_second(policy, batches, seconds)


def sac_image_learner_rate(seconds: float, batch_size: int, env_id: str = "CarRacing-v3") -> float:
    """SAC updates/s from pixels (the critics' shared encoder, the actor on its features) with
    the encoder the frames get by default, on uint8 batches already in this process."""
    from dsac.config import Config
    from dsac.envs.make import make_env
    from dsac.runtime.tf_setup import configure_tensorflow

    configure_tensorflow(0, 2)
    from dsac.runtime.build import make_learner

    config = Config(algo="sac", env=env_id, batch_size=batch_size).validate()
    env = make_env(env_id)
    policy = make_learner(config, env.observation_space, env.action_space)
    rng = np.random.default_rng(0)
    shape, n, act = env.observation_space.shape, batch_size, env.action_space.shape
    batches = [{
        "obs": rng.integers(0, 256, (n, *shape), dtype=np.uint8),
        "action": rng.uniform(-1, 1, (n, *act)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32), "next_obs": rng.integers(0, 256, (n, *shape), dtype=np.uint8),
        "terminated": np.zeros(n, np.float32), "discount": np.full(n, 0.99, np.float32),
        "weights": np.ones(n, np.float32),
    } for _ in range(config.batches_per_sample)]
    return harness.updates_per_second(policy, batches, seconds)


def replay_figures(transitions: int = 4000, seconds: float = 3.0) -> dict:
    """Bytes per transition (at 1M) and sampling rate of a frame-stored replay of real Pong frames."""
    from dsac.envs.rollout import EnvCollector
    from dsac.replay.buffer import PrioritizedReplayStorage, replay_specs, storage_bytes
    from dsac.replay.frames import FrameEncoder

    collector = EnvCollector(ENV, num_envs=4, seed=0, n_step=3)
    specs, frames = replay_specs(collector.observation_space, collector.action_space)
    naive_specs, _ = replay_specs(type(collector.observation_space)(0, 1, (1,)), collector.action_space)
    encoder = FrameEncoder(frames, num_envs=4, n_step=3)
    storage = PrioritizedReplayStorage(specs, 100_000, frames=frames)
    rng = np.random.default_rng(0)
    while storage.size < transitions:
        storage.add(encoder.encode(collector.collect(lambda obs: rng.integers(6, size=len(obs)), 256)))
    stack_bytes = 2 * int(np.prod(collector.observation_space.shape))
    out = {
        "bytes_per_transition": storage_bytes(10**6, specs, frames) / 10**6,
        "bytes_per_transition_as_stacks": storage_bytes(10**6, naive_specs) / 10**6 + stack_bytes - 8,
        "frames_per_transition": storage.frame_store.added / storage.added,
    }
    for batch in (32, 256):
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            storage.sample(batch, 1)
            count += 1
        out[f"sample_{batch}_batches_per_s"] = count / (time.perf_counter() - started)
    return out


def run(report: dict, workers: list[int], window: float, pong_minutes: float, pong_workers: int,
        collection_rate) -> None:
    """Fill ``report["atari"]``; ``collection_rate`` is speed.py's (a local Ray is up)."""
    atari = report.setdefault("atari", {})
    atari["collection_frames_per_s"] = {w: 4 * collection_rate("dqn", ENV, w, window) for w in workers}
    print(f"atari collection: {atari['collection_frames_per_s']}", file=sys.stderr)
    atari["acting_ms_per_batch"] = acting_ms()
    atari["learner_updates_per_s"] = {b: learner_rate(window, b) for b in (32, 64)}
    atari["replay"] = replay_figures()
    print(f"atari: {atari}", file=sys.stderr)
    if pong_minutes > 0:
        import ray

        ray.shutdown()  # the run starts its own
        png = os.path.join(REPO_ROOT, "runs", f"pong-benchmark-{time.strftime('%Y%m%d-%H%M%S')}.png")
        atari["pong"] = game_record("Pong", pong_minutes, pong_workers, 0, png=png)


def markdown(atari: dict) -> list[str]:
    """Rows for speed.py's table."""
    rows = []
    for w, fps in atari.get("collection_frames_per_s", {}).items():
        rows.append(f"| Atari collection, {w} worker(s): frames/s (env steps x 4) | {fps:,.0f} "
                    "| Ape-X: ~140 per actor core |")
    for n, ms in atari.get("acting_ms_per_batch", {}).items():
        rows.append(f"| Atari acting (numpy Nature encoder), batch {n}: ms | {ms:.1f} | |")
    for b, rate in atari.get("learner_updates_per_s", {}).items():
        rows.append(f"| Atari learner (Nature encoder, CPU), batch {b}: updates/s | {rate:,.1f} | |")
    replay = atari.get("replay")
    if replay:
        rows.append(f"| Atari replay: bytes per transition (as stacks) | {replay['bytes_per_transition']:,.0f} "
                    f"({replay['bytes_per_transition_as_stacks']:,.0f}) | <= 8,000 |")
        rows.append(f"| Atari replay: sampled batches/s of 32 / 256 | {replay['sample_32_batches_per_s']:,.0f} / "
                    f"{replay['sample_256_batches_per_s']:,.0f} | |")
    pong = atari.get("pong")
    if pong:
        marks = ", ".join(f"{k} min: {v['return']:.1f} ({v['env_steps']:,} steps)" for k, v in pong["scores"].items())
        rows.append(f"| Pong-v5, {pong['workers']} workers, defaults: eval score at {marks} | best "
                    f"{pong['best']} | >= 0 within 60 min |")
    return rows


if __name__ == "__main__":
    sys.exit(main())

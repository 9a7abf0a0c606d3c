"""Run episodes with a saved policy and print their returns (no Ray needed).

    dsac-infer runs/x/weights.pkl --episodes 10 --seed 0
    dsac-infer runs/x/best_weights.pkl --render          # a window, if there is a display
    dsac-infer runs/x/weights.pkl --video out.mp4        # episode 0 as an mp4 (MuJoCo: EGL off-screen)
"""

import argparse
import statistics
import sys

from dsac.errors import DsacError, OneLineParser, quiet_when_the_reader_leaves

# Episodes one command plays: their seeds (seed + j) must stay below 2^32, and a larger count
# is a typo, not an evaluation.
MAX_EPISODES = 1_000_000


def parser() -> argparse.ArgumentParser:
    """dsac-infer's flags."""
    parser = OneLineParser("infer", prog="dsac-infer", description=__doc__)
    parser.add_argument("path", help="a weights.pkl / best_weights.pkl written by dsac")
    parser.add_argument("--episodes", type=int, default=10, help="episodes to run")
    parser.add_argument("--seed", type=int, default=0, help="episode j resets with seed + j")
    parser.add_argument("--env", default=None, help="environment id (default: the one in the file)")
    parser.add_argument("--explore", action="store_true", help="sample actions instead of acting deterministically")
    parser.add_argument("--render", action="store_true", help="show the episodes in a window")
    parser.add_argument("--video", default=None, help="write episode 0 to this .mp4")
    parser.add_argument("--trust_code", action="store_true",
                        help="allow importing the modules the file names (env module:Name, policy class, custom model)")
    return parser


def make_env_for(args, policy):
    """The env the episodes run in: the file's (its kwargs and preprocessing) unless ``--env``
    names another, rendering for ``--video`` or ``--render``; a one-line error for observations
    of another shape than the policy's."""
    from dsac.envs.make import make_env
    from dsac.output import video

    env_id = args.env or policy.env_id
    env_kwargs = {} if args.env else policy.env_kwargs  # the file's env, unless overridden
    if args.video:
        video.prepare_headless_rendering()
    if args.video or args.render:
        env_kwargs = {**env_kwargs, "render_mode": "rgb_array" if args.video else "human"}
    env = make_env(env_id, env_kwargs, policy.flatten_obs, policy.atari)
    if env.observation_space.shape != policy.observation_space.shape:
        raise DsacError(
            f"{env_id} observes {env.observation_space.shape}, the policy in {args.path} expects "
            f"{policy.observation_space.shape}"
        )
    return env


def play(env, policy, args, frames) -> list[float]:
    """``--episodes`` episodes (episode j reset with ``seed + j``), each one's return printed;
    episode 0 filmed into ``frames`` (None: no video)."""
    returns = []
    for j in range(args.episodes):
        obs, _ = env.reset(seed=args.seed + j)
        if j == 0 and frames is not None:
            frames.take(env)
        total, steps, done = 0.0, 0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs, explore=args.explore))
            total += float(reward)
            steps += 1
            done = terminated or truncated
            if j == 0 and frames is not None:
                frames.take(env)
        returns.append(total)
        cut = ", truncated by the time limit" if truncated and not terminated else ""
        print(f"episode {j}: return {total:.2f} in {steps} steps{cut}")
    return returns


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    """dsac-infer: run episodes with a saved policy; exit 2 on a one-line error, 1 when the env
    or a user class raised."""
    args = parser().parse_args(argv)
    try:
        if not 1 <= args.episodes <= MAX_EPISODES:
            raise DsacError(f"--episodes must be an integer in [1, {MAX_EPISODES:,}], got {args.episodes}")
        if not 0 <= args.seed < 2**32 - args.episodes:
            raise DsacError(f"--seed must be an integer in [0, 2^32 - episodes), got {args.seed}")
        from dsac.output import video
        if args.video:  # before the file is read and the episodes played: an unwritable path costs nothing
            video.check_output_path(args.video, "--video")
        from dsac.formats.files import atomic_write_bytes
        from dsac.formats.inference import load_policy

        policy = load_policy(args.path, seed=args.seed, trust_code=args.trust_code)
        env = make_env_for(args, policy)
        frames = video.Frames() if args.video else None
        returns = play(env, policy, args, frames)
        env.close()
        std = statistics.pstdev(returns) if len(returns) > 1 else 0.0
        print(f"mean return over {len(returns)} episodes: {statistics.fmean(returns):.2f} +- {std:.2f}")
        if args.video:
            data, error, _ = video.finish(frames)
            if error:
                raise DsacError(f"--video: {args.env or policy.env_id} could not be recorded: {error}")
            atomic_write_bytes(args.video, data)
            print(f"video of episode 0 in {args.video}")
    except DsacError as exc:
        print(f"infer: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the env (or a trusted user class) raised mid-episode: one line, exit 1
        lines = [line for line in str(exc).splitlines() if line.strip()]
        print(f"infer: failed: {type(exc).__name__}: {lines[0] if lines else ''}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What an evaluation video costs the evaluator: one evaluation of a fixed random policy with
and without recording episode 0 (rendering plus encoding), A B A B.

    python -m benchmarks video-cost --env Pendulum-v1 Hopper-v5 --episodes 5 --repeats 2
"""

import argparse
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", nargs="+", default=["Pendulum-v1"])
    parser.add_argument("--episodes", type=int, default=5, help="episodes per evaluation")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    import numpy as np

    from dsac.envs.make import make_env
    from dsac.output import video
    from dsac.runtime.evaluation import evaluate

    video.prepare_headless_rendering()
    for env_id in args.env:
        space = make_env(env_id).action_space
        space.seed(0)

        def act(obs, space=space):
            return np.stack([space.sample() for _ in range(len(obs))])

        times = {"plain": [], "recorded": []}
        frames_n, size, error = 0, None, None
        for _ in range(args.repeats):
            for kind in ("plain", "recorded"):
                frames = video.Frames() if kind == "recorded" else None
                started = time.perf_counter()
                evaluate(act, env_id, args.episodes, seed=0, frames=frames)
                data, error, _ = video.finish(frames)
                times[kind].append(time.perf_counter() - started)
                if frames is not None and data:
                    frames_n, size = len(frames.images), frames.images[0].shape[:2]
        plain, recorded = min(times["plain"]), min(times["recorded"])
        if error:
            print(f"{env_id}: no video: {error}")
            continue
        print(f"{env_id}: an evaluation of {args.episodes} episodes {plain:.2f} s, with episode 0 recorded "
              f"{recorded:.2f} s ({frames_n} frames of {size[1]}x{size[0]}: "
              f"{1000 * (recorded - plain) / frames_n:.1f} ms "
              f"a frame rendered and encoded), best of {args.repeats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

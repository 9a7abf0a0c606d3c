"""Export a weights file as a TensorFlow SavedModel with a serving signature obs -> action
(deterministic), loadable by ``tf.saved_model.load`` and TF Serving. Each algorithm says how it
acts in TensorFlow (:attr:`dsac.algorithms.Algorithm.serving`).

    dsac-export runs/x/weights.pkl --savedmodel out/        # or: python -m dsac.export ...
"""

from __future__ import annotations

import argparse
import sys

from dsac.errors import DsacError, quiet_when_the_reader_leaves
from dsac.files import check_writable_dir
from dsac.inference import load_policy
from dsac.models.vision import obs_input
from dsac.registry import algorithm, load_object


def export_savedmodel(weights_path: str, out_dir: str, trust_code: bool = False) -> tuple[str, str]:
    """Write ``out_dir`` with signature ``serving_default(obs: float32[batch, obs_dim]) ->
    {"action": ...}`` (image observations: ``obs`` of the env's shape and dtype, e.g.
    ``uint8[batch, 4, 84, 84]``); returns ``out_dir`` and the signature, described. The file is loaded and checked (see
    :func:`dsac.inference.load_policy`) before TensorFlow is imported."""
    loaded = load_policy(weights_path, trust_code=trust_code)
    if loaded.payload.get("policy_class"):
        raise DsacError(f"weights file {weights_path} holds a user policy class: export it yourself")
    check_writable_dir(out_dir, "--savedmodel")

    from dsac.tf_setup import import_tensorflow

    tf = import_tensorflow()
    model, act = load_object(algorithm(loaded.algo).serving, "serving function")(loaded)
    obs = obs_input(loaded.observation_space)
    module = tf.Module()
    module.model = model
    module.serve = tf.function(
        lambda obs: {"action": act(obs)},
        input_signature=[tf.TensorSpec([None, *obs.input_shape], obs.input_dtype, name="obs")],
    )
    try:
        tf.saved_model.save(module, out_dir, signatures={"serving_default": module.serve})
    except (tf.errors.OpError, OSError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        raise DsacError(f"--savedmodel {out_dir}: cannot write it ({message.strip().splitlines()[0]})") from None
    shape = ", ".join(["batch", *map(str, obs.input_shape)])
    return out_dir, f"serving_default(obs {obs.input_dtype}[{shape}]) -> action"


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dsac-export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", help="a weights.pkl / best_weights.pkl written by dsac")
    parser.add_argument("--savedmodel", required=True, help="output directory of the SavedModel")
    parser.add_argument("--trust_code", action="store_true",
                        help="allow importing the modules the file names (its custom model)")
    args = parser.parse_args(argv)
    try:
        out, signature = export_savedmodel(args.path, args.savedmodel, trust_code=args.trust_code)
    except DsacError as exc:
        print(f"export: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"export: error: cannot write {args.savedmodel}: {exc}", file=sys.stderr)
        return 2
    print(f"SavedModel in {out}: signature {signature}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

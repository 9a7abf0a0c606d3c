"""Export a weights file for serving outside dsac: the deterministic policy obs -> action.

    dsac-export runs/x/weights.pkl --format onnx -o policy.onnx   # onnxruntime, C++, C#, mobile
    dsac-export runs/x/weights.pkl --savedmodel out/              # TensorFlow Serving
    dsac-export runs/x/weights.pkl --format savedmodel -o out/    # the same

ONNX (opset 17) is built from the weights alone with the ``onnx`` package (pip install
'dsac[onnx]'), no TensorFlow: input ``obs`` of the env's observation shape and dtype with a free
batch axis; output ``action`` (SAC, CrossQ: float32 in the env's bounds; DQN: int64, plus
``q_values``). The SavedModel's signature is ``serving_default(obs) -> {"action"}``. Both are
the policy's acting network, as its algorithm describes it once
(:class:`dsac.models.acting_net.ActingNet`), in ONNX and in TensorFlow.
"""

from __future__ import annotations

import os
import sys

from dsac.errors import DsacError, OneLineParser, quiet_when_the_reader_leaves
from dsac.formats.files import atomic_write_bytes, check_writable_dir
from dsac.formats.inference import load_policy
from dsac.models.acting_net import tf_serving
from dsac.models.onnx_ops import onnx_policy
from dsac.runtime.tf_setup import own_this_process

FORMATS = ("onnx", "savedmodel")


def _exportable(weights_path: str, trust_code: bool):
    """The file's :class:`dsac.formats.inference.LoadedPolicy`, loaded and checked before anything else."""
    loaded = load_policy(weights_path, trust_code=trust_code)
    if loaded.payload.get("policy_class"):
        raise DsacError(f"weights file {weights_path} holds a user policy class: export it yourself")
    return loaded


def export_onnx(weights_path: str, out_path: str, trust_code: bool = False) -> tuple[str, str]:
    """Write the ONNX graph of the policy in ``weights_path`` to ``out_path``; returns the path
    and the graph's signature, described. Built-in networks only: a custom model is refused in
    one line (export a SavedModel and convert it with tf2onnx)."""
    loaded = _exportable(weights_path, trust_code)
    if loaded.config.model.custom_model:
        raise DsacError(f"weights file {weights_path} has a custom model ({loaded.config.model.custom_model}): "
                        "ONNX export builds dsac's own networks only; export --format savedmodel and convert "
                        "that with tf2onnx")
    if os.path.isdir(out_path):
        raise DsacError(f"-o {out_path} is a directory: give the .onnx file's path")
    check_writable_dir(os.path.dirname(os.path.abspath(out_path)), "-o")
    policy = loaded.policy
    model = onnx_policy(policy.net, policy.get_weights(), loaded.observation_space, loaded.goal_spaces())
    atomic_write_bytes(out_path, model.SerializeToString())
    return out_path, describe_onnx(model)


def describe_onnx(model) -> str:
    """``obs float32[batch, 3] -> action float32[batch, 1] (opset 17)``: names, dtypes, shapes."""
    from onnx import helper

    def value(v):
        t = v.type.tensor_type
        dims = ", ".join(d.dim_param or str(d.dim_value) for d in t.shape.dim)
        return f"{v.name} {helper.tensor_dtype_to_np_dtype(t.elem_type)}[{dims}]"

    opset = model.opset_import[0].version
    outputs = ", ".join(map(value, model.graph.output))
    return f"{', '.join(map(value, model.graph.input))} -> {outputs} (opset {opset})"


def export_savedmodel(weights_path: str, out_dir: str, trust_code: bool = False) -> tuple[str, str]:
    """Write ``out_dir`` with signature ``serving_default(obs: float32[batch, obs_dim]) ->
    {"action": ...}`` (image observations: ``obs`` of the env's shape and dtype, e.g.
    ``uint8[batch, 4, 84, 84]``); returns ``out_dir`` and the signature, described. The file is loaded and checked (see
    :func:`dsac.formats.inference.load_policy`) before TensorFlow is imported."""
    loaded = _exportable(weights_path, trust_code)
    check_writable_dir(out_dir, "--savedmodel")

    from dsac.runtime.tf_setup import import_tensorflow

    tf = import_tensorflow()
    policy, obs = loaded.policy, loaded.policy.obs
    custom = policy.keras_forward.model if policy.keras_forward is not None else None
    act = tf_serving(policy.net, policy.get_weights(), custom)
    module = tf.Module()
    module.model = custom  # its variables saved with the module
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


def _format_and_output(args) -> tuple[str, str]:
    """(format, output) from the flags: ``--savedmodel DIR`` alone, or ``--format`` with ``-o``
    (without ``--format``, an output ending in .onnx is ONNX)."""
    if args.savedmodel and args.output:
        raise DsacError("give the output once: --savedmodel DIR or -o PATH")
    output = args.savedmodel or args.output
    if not output:
        raise DsacError("no output: -o policy.onnx (with --format onnx) or --savedmodel DIR")
    fmt = args.format or ("savedmodel" if args.savedmodel or not output.endswith(".onnx") else "onnx")
    if args.savedmodel and fmt != "savedmodel":
        raise DsacError(f"--savedmodel writes a SavedModel, not --format {fmt}: use -o for the output")
    return fmt, output


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    own_this_process()
    parser = OneLineParser("export", prog="dsac-export", description=__doc__)
    parser.add_argument("path", help="a weights.pkl / best_weights.pkl written by dsac")
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="onnx (a .onnx file) or savedmodel (a directory); default: onnx for an output "
                             "ending in .onnx, else savedmodel")
    parser.add_argument("-o", "--output", default=None, help="the .onnx file or the SavedModel directory to write")
    parser.add_argument("--savedmodel", default=None, help="output directory of a SavedModel (as --format "
                        "savedmodel -o DIR)")
    parser.add_argument("--trust_code", action="store_true",
                        help="allow importing the modules the file names (its custom model)")
    args = parser.parse_args(argv)
    output = args.output or args.savedmodel
    try:
        fmt, output = _format_and_output(args)
        export = export_onnx if fmt == "onnx" else export_savedmodel
        out, signature = export(args.path, output, trust_code=args.trust_code)
    except DsacError as exc:
        print(f"export: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"export: error: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"ONNX in {out}: {signature}" if fmt == "onnx" else f"SavedModel in {out}: signature {signature}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

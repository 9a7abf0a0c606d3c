"""Convert a weights file of dsac's old format 1 (numpy objects pickled) to the current
format (builtins only, see dsac.formats.safe_pickle). Reading format 1 trusts the file: a crafted one
can crash this process or read its memory, so convert only files you trust (e.g. your own runs).

    dsac-convert-weights runs/x/weights.pkl              # writes runs/x/weights.pkl in place
    dsac-convert-weights old.pkl --out new.pkl
"""

import pickle
import sys

from dsac.errors import DsacError, OneLineParser, quiet_when_the_reader_leaves
from dsac.formats.files import FORMAT_1_GLOBALS, FORMAT_VERSION, load_weights, save_weights


class _Format1Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if f"{module}.{name}" in FORMAT_1_GLOBALS:  # what format 1 admitted: numpy's arrays and dtypes
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    parser = OneLineParser("convert", prog="dsac-convert-weights", description=__doc__)
    parser.add_argument("path", help="a format-1 weights file you trust")
    parser.add_argument("--out", default=None, help="where to write the converted file (default: in place)")
    args = parser.parse_args(argv)
    out = args.out or args.path
    try:
        try:
            with open(args.path, "rb") as f:
                payload = _Format1Unpickler(f).load()
        except OSError as exc:
            raise DsacError(f"cannot read {args.path}: {exc.strerror or exc}") from None
        except Exception as exc:
            raise DsacError(f"{args.path} is not a format-1 weights file ({type(exc).__name__}: {exc})") from None
        if not isinstance(payload, dict) or payload.get("format_version") != 1:
            raise DsacError(f"{args.path} is not a format-1 weights file")
        payload.pop("format_version")
        try:
            save_weights(out, payload)
        except TypeError as exc:
            raise DsacError(f"{args.path} holds something the current format cannot store: {exc}") from None
        except OSError as exc:
            raise DsacError(f"cannot write {out}: {exc.strerror or exc}") from None
        load_weights(out)  # the converted file passes every check of the safe loader
    except DsacError as exc:
        print(f"convert: error: {exc}", file=sys.stderr)
        return 2
    print(f"converted {args.path} to format {FORMAT_VERSION}: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Export a dsac weights file as a TensorFlow SavedModel (obs -> deterministic action).

    python scripts/export.py runs/x/weights.pkl --savedmodel out/
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dsac.errors import DsacError  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", help="a weights.pkl / best_weights.pkl written by dsac")
    parser.add_argument("--savedmodel", required=True, help="output directory of the SavedModel")
    parser.add_argument("--trust_code", action="store_true",
                        help="allow importing the modules the file names (its custom model)")
    args = parser.parse_args(argv)
    try:
        from dsac.export import export_savedmodel

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

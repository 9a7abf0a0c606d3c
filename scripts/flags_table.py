"""Print the README's flag table from dsac.config.Config (paste it into README.md).

    python scripts/flags_table.py
"""

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dsac.config import Config  # noqa: E402
from dsac.registry import ALGOS, algorithm  # noqa: E402

ALGO_DEFAULTS = {name: algorithm(name).defaults for name in ALGOS}


def flags_table() -> str:
    """One Markdown row per flag: name, default (per algorithm where it differs), help."""
    rows = ["| flag | default | what |", "|---|---|---|"]
    for f in dataclasses.fields(Config):
        if f.metadata.get("cli") is False:
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if default is None and f.name in ALGO_DEFAULTS["sac"]:
            default = ", ".join(f"{algo} {values[f.name]}" for algo, values in ALGO_DEFAULTS.items())
        elif isinstance(default, list):
            default = " ".join(map(str, default))
        flag = f"--[no-]{f.name}" if f.type.startswith("bool") else f"--{f.name}"
        rows.append(f"| `{flag}` | `{default}` | {f.metadata['help']} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(flags_table(), end="")

"""User-facing errors: one line that names the problem, no traceback."""

import difflib


class DsacError(Exception):
    """A problem with the user's input or environment, reported as one line.

    ``launch.py`` prints ``dsac: error: <message>`` and exits with status 2.
    """


class RunFailed(Exception):
    """A role failed mid-run; what was learned so far has been saved (``launch.py`` exits 1)."""


def did_you_mean(word: str, choices, cutoff: float = 0.6) -> str:
    """`` (did you mean a, b?)`` with the closest of ``choices``, or an empty string."""
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=cutoff)
    return f" (did you mean {', '.join(close)}?)" if close else ""

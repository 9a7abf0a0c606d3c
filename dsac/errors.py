"""User-facing errors: one line that names the problem, no traceback."""


class DsacError(Exception):
    """A problem with the user's input or environment, reported as one line.

    ``launch.py`` prints ``dsac: error: <message>`` and exits with status 2.
    """

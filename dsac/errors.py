"""User-facing errors: one line that names the problem, no traceback."""

import argparse
import difflib
import functools
import logging
import os
import select
import signal
import sys


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


def quiet_when_the_reader_leaves(main):
    """A console main whose reader stops reading (``python -m benchmarks mujoco --report | head``)
    ends quietly with status 141 (128 + SIGPIPE, what a shell reports for coreutils there), not with
    a traceback. A broken pipe that is not standard output's (a socket's) is raised as before.
    Log lines the reader can no longer take are dropped, not each reported on stderr (a training
    run logging to stdout goes on to its end)."""

    @functools.wraps(main)
    def run(*args, **kwargs):
        logging.raiseExceptions = False
        try:
            try:
                return main(*args, **kwargs)
            finally:  # what stdout still buffers (argparse's --help too) fails here, not at exit
                if sys.stdout is not None:
                    sys.stdout.flush()
        except BrokenPipeError:
            if not _stdout_reader_gone():
                raise
            # Python flushes stdout again at exit and would fail once more there.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 128 + signal.SIGPIPE

    return run


def _stdout_reader_gone() -> bool:
    """Standard output is a pipe whose read end is closed (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no real stdout
        return False


class OneLineParser(argparse.ArgumentParser):
    """A user command's flags, refused as its other errors are: one line naming the command
    (``name``: ``infer``, ``submit``, ``dsac-doctor``), exit 2 (argparse's own convention)."""

    def __init__(self, name: str, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(**kwargs)
        self.name = name

    def error(self, message):
        self.exit(2, f"{self.name}: error: {message}\n")

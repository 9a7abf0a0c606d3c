"""A node's newest weights in shared memory: one writer (the parameter server on its own node,
a :mod:`weights cache <dsac.distributed.weights_cache>` on every other node) and any number of
readers (rollout workers, the evaluator) on the same machine, which see a new version without
any call: a reader's check is one read of a sequence counter, and a new version is one copy.

This module is the board's public face (what the parameter server, the caches, the rollout
workers and the driver import); each part has a module of its own:

- :mod:`dsac.distributed.board_files`: the user's own 0700 folder and the checks that keep
  a file another user planted there (or a link, a FIFO) from ever being opened for writing,
  adopted, decoded or removed;
- :mod:`dsac.distributed.board_format`: the board's and the data file's bytes, and the
  version's codec (a JSON header and raw arrays behind a CRC-32, never :mod:`pickle`);
- :mod:`dsac.distributed.board_writer`: :class:`BoardWriter` (publish under a sequence lock,
  heartbeat, the workers' slots) and :class:`BoardLoop`, its side in an asyncio actor;
- :mod:`dsac.distributed.board_reader`: :class:`BoardReader`, which takes each newer version
  and refuses a board whose data was changed by something else than its writer.

A folder or file that fails a check is skipped with one log line and never raises into a
worker. A reader whose board's heartbeat is older than :data:`STALE_S` treats the writer as
gone (the caller falls back to pulling the parameter server), as does one whose board was
refused.
"""

from __future__ import annotations

from dsac.distributed.board_files import board_dir, board_path, remove_boards, sweep_stale
from dsac.distributed.board_format import HEARTBEAT_S, STALE_S, BoardRefused
from dsac.distributed.board_reader import BoardReader
from dsac.distributed.board_writer import BoardLoop, BoardWriter

__all__ = [
    "HEARTBEAT_S",
    "STALE_S",
    "BoardLoop",
    "BoardReader",
    "BoardRefused",
    "BoardWriter",
    "board_dir",
    "board_path",
    "remove_boards",
    "sweep_stale",
]

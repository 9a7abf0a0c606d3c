"""The bytes of a weights board (:mod:`dsac.distributed.weights_board`) and of its data
files, and a version's codec: what a writer encodes and what a reader accepts.

Two files per run and node, named after the board:

- the *board* ``wb-<name>``: a header (a sequence counter, the version, the data file's id,
  the payload's length, the writer's heartbeat, the stop flag) and one slot per rollout
  worker, where each writes the version it acts with, when it took it and how far behind it
  had been;
- the *data* file ``wb-<name>.<id>`` (16 hex digits, random): the version's payload, decoded
  without :mod:`pickle` (nothing in it is ever called or imported): :data:`DATA_HEAD` (a
  magic, the JSON header's length, the CRC-32 of everything after :data:`DATA_HEAD` up to
  the payload's length), the JSON header ``{"version", "arrays": [[name, dtype, shape], ...],
  "report"}`` (the learner's report as the list of its fields), then each array's raw
  little-endian bytes at the next multiple of :data:`ALIGN`. A reader checks the sizes
  against the mapped file before it copies, the checksum after, and the dtypes (numeric
  only: :data:`dsac.formats.safe_pickle.DTYPES`), shapes and offsets against the copy before any
  array is made.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from typing import NamedTuple

import numpy as np

from dsac.formats.safe_pickle import DTYPES, MAX_NDIM
from dsac.runtime.messages import LearnerReport

MAGIC = b"dsacwb02"
# magic, sequence, version, data file id, payload bytes, heartbeat (time.monotonic(): one clock
# for every process of a machine), stop
HEADER = struct.Struct("<8sQqqqdq")
SEQ, FIELDS, BEAT, STOP = struct.Struct("<Q"), struct.Struct("<qqq"), struct.Struct("<d"), struct.Struct("<q")
SEQ_AT, FIELDS_AT, BEAT_AT, STOP_AT = 8, 16, 40, 48
# per rollout worker: the version it acts with, how many versions it skipped at its last take,
# when it took it (time.monotonic()), then its count of takes, written last (a writer that sees
# a new count sees the fields before it); version -1: none (never written, or its reader left)
SLOT = struct.Struct("<qqdq")
SLOT_FIELDS, TAKEN = struct.Struct("<qqd"), struct.Struct("<q")
TAKEN_AT = SLOT_FIELDS.size
# A data file's start: magic, the JSON header's bytes, CRC-32 of the rest of the payload (the
# header, the padding, the arrays), reserved. CRC-32 is a check against torn copies, not
# against a forger (the owner checks are that), and costs little next to the copy itself.
DATA_MAGIC = b"dsacwd01"
DATA_HEAD = struct.Struct("<8sQII")
ALIGN = 64  # each array starts at a multiple of this (aligned arrays for numpy and TensorFlow)
# A board whose heartbeat is this old has lost its writer.
STALE_S = 10.0
# How often a writer beats and reads its readers' slots.
HEARTBEAT_S = 0.02


class BoardRefused(OSError):
    """A board's folder or file that is not ours alone (another owner, group or other
    permission bits, a symbolic link, not a regular file) or not what a writer of ours
    writes. An OSError, so that a writer's callers treat it as a board that cannot be made."""


class Torn(Exception):
    """A copy that is not one write of the writer's (checked again at the next check)."""


def align(offset: int) -> int:
    """``offset`` rounded up to a multiple of :data:`ALIGN`."""
    return -(-offset // ALIGN) * ALIGN


def _plain(value):
    """JSON for the numpy scalars a report's statistics may hold."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a {type(value).__name__} cannot go on a weights board")


def _arrays(weights) -> list[tuple[str, np.ndarray]]:
    """The weights as ``(name, contiguous little-endian array)``; TypeError for anything else
    than a dict of numeric arrays by string names."""
    if not isinstance(weights, dict):
        raise TypeError(f"weights on a board are a dict of arrays, not a {type(weights).__name__}")
    arrays = []
    for key, value in weights.items():
        array = np.asarray(value)
        if not isinstance(key, str) or array.dtype.name not in DTYPES or array.ndim > MAX_NDIM:
            raise TypeError(f"weights entry {key!r} ({array.dtype}, {array.ndim} dims) cannot go on a weights board")
        arrays.append((key, np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))))
    return arrays


class Encoded(NamedTuple):
    """A version laid out for a data file: its JSON header, its arrays and where each starts;
    ``length`` is the payload's bytes (the data file holds at least this many)."""

    header: bytes
    arrays: list[tuple[str, np.ndarray]]
    offsets: list[int]
    length: int


def encode(version: int, weights, report) -> Encoded:
    """Lay ``(version, weights, report)`` out (nothing is written yet: see :func:`write`).

    Raises:
        TypeError: weights that are not a dict of numeric arrays by string names, or a report
            that is not a :class:`dsac.runtime.messages.LearnerReport`.
    """
    arrays = _arrays(weights)
    if report is not None and not isinstance(report, LearnerReport):
        raise TypeError(f"a board's report is a LearnerReport, not a {type(report).__name__}")
    header = json.dumps({"version": int(version), "arrays": [[n, a.dtype.name, list(a.shape)] for n, a in arrays],
                         "report": None if report is None else list(report)},
                        separators=(",", ":"), default=_plain).encode()
    offsets, end = [], DATA_HEAD.size + len(header)
    for _, array in arrays:
        offsets.append(align(end))
        end = offsets[-1] + array.nbytes
    return Encoded(header, arrays, offsets, end)


def write(data, encoded: Encoded) -> None:
    """Write ``encoded`` into ``data`` (a mapping of at least ``encoded.length`` bytes): the
    header, zero padding, the arrays, then :data:`DATA_HEAD` with the checksum."""
    header, at = encoded.header, DATA_HEAD.size + len(encoded.header)
    data[DATA_HEAD.size:at] = header
    for offset, (_, array) in zip(encoded.offsets, encoded.arrays, strict=True):
        data[at:offset] = bytes(offset - at)  # the padding: zeros, as the checksum saw them
        data[offset:offset + array.nbytes] = array.reshape(-1).view(np.uint8)
        at = offset + array.nbytes
    with memoryview(data) as view, view[DATA_HEAD.size:encoded.length] as body:
        crc = zlib.crc32(body)
    DATA_HEAD.pack_into(data, 0, DATA_MAGIC, len(header), crc, 0)


def _header(payload: bytearray, version: int) -> tuple[dict, int]:
    """``(header, its length)`` of a copied payload after its start and checksum are checked.
    Raises :class:`Torn`, :class:`BoardRefused` (see :func:`decode`)."""
    length = len(payload)
    if length < DATA_HEAD.size:
        raise Torn("shorter than its start")
    magic, header_len, crc, _ = DATA_HEAD.unpack_from(payload)
    if magic != DATA_MAGIC or header_len > length - DATA_HEAD.size:
        raise Torn("its start does not match its length")
    with memoryview(payload) as view, view[DATA_HEAD.size:] as body:
        if zlib.crc32(body) != crc:
            raise Torn("checksum mismatch")
    try:
        header = json.loads(bytes(payload[DATA_HEAD.size:DATA_HEAD.size + header_len]))
    except (ValueError, RecursionError) as exc:
        raise BoardRefused(f"unreadable header ({exc})") from None
    if not (isinstance(header, dict) and isinstance(header.get("arrays"), list)):
        raise BoardRefused("a header without its arrays")
    if header.get("version") != version:
        raise Torn(f"version {header.get('version')!r} inside, {version} in the board")
    return header, header_len


def decode(payload: bytearray, version: int):
    """``(version, weights, report)`` from a copied payload. Raises :class:`Torn` where it
    is not one coherent write of ``version``, :class:`BoardRefused` where a coherent write is
    not what a writer of ours writes. The arrays are views of ``payload`` (no second copy)."""
    header, header_len = _header(payload, version)
    length = len(payload)
    weights, offset = {}, DATA_HEAD.size + header_len
    for entry in header["arrays"]:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str) and entry[0] not in weights
                and isinstance(entry[1], str) and entry[1] in DTYPES and isinstance(entry[2], list)
                and len(entry[2]) <= MAX_NDIM
                and all(type(n) is int and n >= 0 for n in entry[2])):
            raise BoardRefused(f"array entry {str(entry)[:100]} is not [new name, numeric dtype, shape]")
        name, dtype_name, shape = entry
        dtype = np.dtype(dtype_name).newbyteorder("<")
        count = math.prod(shape)  # Python ints: no overflow
        offset = align(offset)
        if offset + count * dtype.itemsize > length:
            raise BoardRefused(f"array {name[:100]} {shape} of {dtype_name} runs past the payload's {length} bytes")
        weights[name] = np.frombuffer(payload, dtype, count, offset).reshape(shape)
        offset += count * dtype.itemsize
    if offset != length:
        raise BoardRefused(f"the arrays end at byte {offset}, the payload at {length}")
    report = header.get("report")
    if report is not None:
        if not (isinstance(report, list) and len(report) == len(LearnerReport._fields)):
            raise BoardRefused("a report that is not a learner report's fields")
        report = LearnerReport(*report)
    return version, weights, report

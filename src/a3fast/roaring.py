"""The portable Roaring serialisation of id sets (the format of CRoaring, Java RoaringBitmap,
Go roaring and pyroaring's `BitMap.serialize`), for a3fast's compact records and engines.

The native engine writes the same format straight from its words (`_core.words_to_roaring`).
"""
from __future__ import annotations

import struct
import sys
from array import array
from typing import Iterable

import numpy as np
from pyroaring import BitMap

__all__ = ["serialize_ids", "deserialize_ids", "NO_RUN_COOKIE"]

NO_RUN_COOKIE = 12346
ARRAY_LIMIT = 4096


def serialize_ids(ids: Iterable[int] | np.ndarray) -> bytes:
    """Sorted unique 32-bit ids in the portable Roaring format (no run containers), as written by
    CRoaring, Java RoaringBitmap and Go roaring: any of them can read it."""
    if isinstance(ids, list) and ids and ids[-1] < 65536 and len(ids) <= ARRAY_LIMIT:
        # the common case, one array container: header, one key, one offset, the 16-bit values
        values = array("H", ids)
        if sys.byteorder != "little":
            values.byteswap()
        return struct.pack("<IIHHI", NO_RUN_COOKIE, 1, 0, len(ids) - 1, 16) + values.tobytes()
    arr = np.asarray(ids if isinstance(ids, np.ndarray) else list(ids), dtype=np.uint32)
    if arr.size == 0:
        return struct.pack("<II", NO_RUN_COOKIE, 0)
    keys = arr >> 16
    lows = (arr & 0xFFFF).astype("<u2")
    bounds = np.flatnonzero(np.diff(keys)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [arr.size]))
    header = [struct.pack("<II", NO_RUN_COOKIE, len(starts))]
    header += [struct.pack("<HH", int(keys[s]), int(e - s - 1)) for s, e in zip(starts, ends)]
    bodies = []
    for s, e in zip(starts, ends):
        if e - s <= ARRAY_LIMIT:
            bodies.append(lows[s:e].tobytes())
        else:
            words = np.zeros(1024, dtype="<u8")
            low = lows[s:e].astype(np.uint64)
            np.bitwise_or.at(words, (low >> 6).astype(np.intp), np.uint64(1) << (low & np.uint64(63)))
            bodies.append(words.tobytes())
    offset = 8 + 4 * len(starts) + 4 * len(starts)
    offsets = []
    for body in bodies:
        offsets.append(struct.pack("<I", offset))
        offset += len(body)
    return b"".join(header + offsets + bodies)


def deserialize_ids(data: bytes) -> BitMap:
    """Any portable Roaring bitmap (with or without runs) -> BitMap."""
    try:
        return BitMap.deserialize(data)
    except Exception as exc:  # pyroaring raises ValueError or a C-level error on corrupt input
        raise ValueError(f"not a portable Roaring bitmap: {exc}") from None

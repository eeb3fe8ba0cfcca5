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
    listed = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
    # pyroaring writes this format (arrays up to 4,096 values, bitmaps above) several times faster
    # than building the containers here; `optimize=False` keeps run containers out of it
    return BitMap(listed, optimize=False).serialize()


def deserialize_ids(data: bytes) -> BitMap:
    """Any portable Roaring bitmap (with or without runs) -> BitMap."""
    try:
        return BitMap.deserialize(data)
    except Exception as exc:  # pyroaring raises ValueError or a C-level error on corrupt input
        raise ValueError(f"not a portable Roaring bitmap: {exc}") from None

"""The portable Roaring serialisation of id sets (the format of CRoaring, Java RoaringBitmap,
Go roaring and pyroaring's `BitMap.serialize`), for a3fast's compact records and engines.

The native engine writes the same format straight from its words (`_core.words_to_roaring`).
"""
from __future__ import annotations

from array import array
from typing import Iterable

import numpy as np
from pyroaring import BitMap

__all__ = ["serialize_ids", "deserialize_ids"]


def serialize_ids(ids: Iterable[int] | np.ndarray) -> bytes:
    """Sorted unique 32-bit ids in the portable Roaring format, as CRoaring, Java RoaringBitmap and
    Go roaring write and read it: per 65,536-id chunk the smallest of an array, a bitmap or a run
    container (CRoaring's run_optimize, which pyroaring applies to a BitMap made from values; the
    native engine's `words_to_roaring` writes the same bytes from its words)."""
    if isinstance(ids, np.ndarray):
        # a uint32 array's buffer, read by pyroaring in one call rather than id by id
        values = array("I")
        values.frombytes(ids.astype("=u4", copy=False).tobytes())
        return BitMap(values).serialize()
    return BitMap(ids).serialize()


def deserialize_ids(data: bytes) -> BitMap:
    """Any portable Roaring bitmap (with or without runs) -> BitMap."""
    try:
        return BitMap.deserialize(data)
    except Exception as exc:  # pyroaring raises ValueError or a C-level error on corrupt input
        raise ValueError(f"not a portable Roaring bitmap: {exc}") from None

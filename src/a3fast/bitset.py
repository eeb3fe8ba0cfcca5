"""Python ints as sets of small non-negative integers (bit i set <=> i in the set).

An AND of two 1,000-bit ints costs about as much as one attribute lookup, so the pure engine keeps
its rows this way, and the authority model its capability sets.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["bits_to_ids", "ids_to_bits"]


def bits_to_ids(bits: int) -> list[int]:
    """Ascending ids of the set bits of a non-negative int."""
    if bits.bit_count() <= 16:
        out = []
        while bits:
            low = bits & -bits
            out.append(low.bit_length() - 1)
            bits ^= low
        return out
    raw = np.frombuffer(bits.to_bytes((bits.bit_length() + 7) // 8, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")).tolist()


def ids_to_bits(ids: Sequence[int], size: int) -> int:
    """The int with the bits of `ids` set; every id is below `size`."""
    flags = np.zeros(size, dtype=bool)
    flags[np.asarray(ids, dtype=np.int64)] = True
    return int.from_bytes(np.packbits(flags, bitorder="little").tobytes(), "little")

"""The journal's CRC-32 (zlib-ng's, in `a3fast.durable.journal`) is zlib's: the same value for every payload and
starting value, so a journal written by either reads back with the other, and damage is found."""
from __future__ import annotations

import struct
import zlib

from hypothesis import given, settings, strategies as st

from a3fast.durable.journal import MAGIC, crc32, frame, read_entries


@settings(max_examples=300)
@given(data=st.binary(max_size=70_000), start=st.integers(0, 2**32 - 1))
def test_a_crc_is_zlibs_for_any_bytes_and_start(data, start):
    assert crc32(data) == zlib.crc32(data)
    assert crc32(data, start) == zlib.crc32(data, start)


def test_an_entry_framed_with_zlibs_crc_reads_back_and_a_flipped_byte_is_found():
    payloads = [b"", b"x", bytes(range(256)) * 400]
    written = b""
    for payload in payloads:
        length = len(payload)
        crc = zlib.crc32(payload, zlib.crc32(length.to_bytes(4, "little")))
        written += struct.pack("<4sII", MAGIC, length, crc) + payload
    assert written == b"".join(frame(p) for p in payloads)
    assert read_entries(written).entries == payloads
    damaged = bytearray(written)
    damaged[-5] ^= 1          # inside the last payload: a torn tail, cut there
    recovered = read_entries(bytes(damaged))
    assert recovered.entries == payloads[:-1]

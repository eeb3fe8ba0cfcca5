"""The snapshot container: a versioned, checksummed file of named binary sections (docs/snapshot.md).

This module owns the bytes on disk — magic, format version, header, section table, alignment,
checksum — and nothing about fleets: `Fleet.save` decides what goes into the sections and
`Fleet.load` what comes out. Reading checks, in this order, that the file is a snapshot at all
(magic), of the version this a3fast reads, whole (its stated length), and undamaged (CRC-32 of
every byte before the trailer, which catches any single flipped byte), so a bad file is named for
what is wrong with it and never half read.
"""
from __future__ import annotations

import os
import stat
import struct
import threading
import zlib
from pathlib import Path
from typing import Any, Mapping

import orjson

from .errors import SnapshotError, SnapshotUnreadable, describe
from .files import atomic_file

__all__ = ["MAGIC", "FORMAT_VERSION", "READ_VERSIONS", "write", "read", "encode", "decode",
           "Checksum"]

#: First 8 bytes of every snapshot (a non-ASCII first byte, so no text file starts this way).
MAGIC = b"\x89A3FLEET"
#: Last 4 bytes of every whole snapshot.
END = b"A3FE"
#: The newest format version. 2 may hold packed declarations (a fleet's `declaration_codec`), which
#: a reader of version 1 would take for JSON; a fleet without them is written as version 1, which
#: every a3fast reads.
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
#: magic, u32 format version, u32 header length
_HEAD = struct.Struct("<8sII")
#: u64 length of everything before the trailer, u32 CRC-32 of it, end mark
_TRAILER = struct.Struct("<QI4s")
_ALIGN = 8


def _parts(header: Mapping[str, Any], sections: Mapping[str, bytes | memoryview], version: int) -> list:
    """The file's bytes before the trailer: head, JSON header (with the section table), then the
    sections, each 8-byte aligned."""
    table: list[list[Any]] = []
    body: list[bytes | memoryview] = []
    at = 0
    for name, data in sections.items():
        pad = -at % _ALIGN
        if pad:
            body.append(b"\0" * pad)
        at += pad
        table.append([name, at, len(data)])
        body.append(data)
        at += len(data)
    head_json = orjson.dumps({**header, "sections": table})
    head_json += b" " * (-(len(head_json) + _HEAD.size) % _ALIGN)
    return [_HEAD.pack(MAGIC, version, len(head_json)), head_json, *body]


def _trailer(parts: list) -> bytes:
    crc, length = 0, 0
    for part in parts:
        crc = zlib.crc32(part, crc)
        length += len(part)
    return _TRAILER.pack(length, crc, END)


def encode(header: Mapping[str, Any], sections: Mapping[str, bytes | memoryview],
           version: int = FORMAT_VERSION) -> bytes:
    """A snapshot's bytes."""
    parts = _parts(header, sections, version)
    return b"".join([*parts, _trailer(parts)])


#: Snapshots shorter than this are checksummed at once: a thread's start, and the reader's wait for
#: the interpreter to hand it the GIL (up to the 5 ms switch interval), cost more than their CRC.
_THREAD_FROM = 1 << 20


class Checksum:
    """A snapshot's checksum computed on a thread of its own while the caller goes on reading the
    sections (zlib releases the GIL over the buffer, so on a second core it costs no time):
    `Checksum(data, source)` checks the frame at once (mark, version, length: SnapshotError), then
    `wait()` raises SnapshotError if the bytes are damaged. A reader that builds from unchecked
    bytes calls `wait()` before it hands anything out, and after any error of its own, so that a
    damaged file is named as damaged whatever else went wrong with it."""

    __slots__ = ("source", "expected", "_found", "_thread")

    def __init__(self, data: bytes, source: str = "snapshot"):
        self.source = source
        length, self.expected = _frame(data, source)
        self._found: int | None = None
        self._thread: threading.Thread | None = None
        view = memoryview(data)[:length]
        if length < _THREAD_FROM:
            self._found = zlib.crc32(view)
            return

        def run() -> None:
            self._found = zlib.crc32(view)

        self._thread = threading.Thread(target=run, name="a3fast-snapshot-crc", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
        if self._found != self.expected:
            raise SnapshotError(f"{self.source}: the snapshot is damaged (its checksum does not match)")


def _frame(data: bytes, source: str) -> tuple[int, int]:
    """(length before the trailer, stated CRC-32) of bytes framed as a snapshot, or SnapshotError:
    not a snapshot, another version, cut short."""
    if data[:len(MAGIC)] != MAGIC:
        raise SnapshotError(f"{source}: not an a3fast fleet snapshot (it does not start with the "
                            f"snapshot mark {MAGIC!r})")
    if len(data) < _HEAD.size:
        raise SnapshotError(f"{source}: the snapshot is cut short ({len(data)} bytes, not even its "
                            f"{_HEAD.size}-byte head)")
    _, version, head_len = _HEAD.unpack_from(data)
    if version not in READ_VERSIONS:
        raise SnapshotError(f"{source}: snapshot format version {version}; this a3fast reads "
                            f"versions {READ_VERSIONS[0]} to {READ_VERSIONS[-1]}")
    if len(data) < _HEAD.size + head_len + _TRAILER.size or data[-len(END):] != END:
        raise SnapshotError(f"{source}: the snapshot is cut short ({len(data)} bytes, no end mark): "
                            f"it was not written whole")
    length, crc, _ = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    if length != len(data) - _TRAILER.size:
        raise SnapshotError(f"{source}: the snapshot states {length + _TRAILER.size} bytes but has "
                            f"{len(data)}: it is cut short or has bytes added")
    return length, crc


def decode(data: bytes, source: str = "snapshot", checksum: Checksum | None = None
           ) -> tuple[dict[str, Any], dict[str, memoryview]]:
    """(header, {section name: a view of its bytes}) of a snapshot's bytes, or SnapshotError naming
    what is wrong. The header's `section_starts` gives each section's offset in `data`, for a reader
    that slices `data` itself rather than copying a section. With a `checksum` under way, the frame
    is taken as checked and the checksum left to the caller's `checksum.wait()`; without one, it is
    checked here, first."""
    if checksum is None:
        length, crc = _frame(data, source)
        if zlib.crc32(memoryview(data)[:length]) != crc:
            raise SnapshotError(f"{source}: the snapshot is damaged (its checksum does not match)")
    else:
        length = len(data) - _TRAILER.size
    _, _, head_len = _HEAD.unpack_from(data)
    view = memoryview(data)
    try:
        header = orjson.loads(view[_HEAD.size:_HEAD.size + head_len])
    except orjson.JSONDecodeError as exc:
        raise SnapshotError(f"{source}: the snapshot's header is malformed ({exc})") from None
    if type(header) is not dict:
        raise SnapshotError(f"{source}: the snapshot's header: expected a JSON object, found {describe(header)}")
    if "section_starts" in header:
        raise SnapshotError(f"{source}: header.section_starts: not a field a snapshot's header holds")
    start = _HEAD.size + head_len
    table = header.pop("sections", None)
    sections, starts = {}, {}
    if type(table) is not list:
        raise SnapshotError(f"{source}: header.sections: expected a list of [name, offset, length], "
                            f"found {describe(table)}")
    for at, entry in enumerate(table):
        where = f"header.sections[{at}]"
        if not (type(entry) is list and len(entry) == 3 and type(entry[0]) is str
                and type(entry[1]) is int and type(entry[2]) is int):
            raise SnapshotError(f"{source}: {where}: expected [name, offset, length] (a string and two "
                                f"integers), found {describe(entry)}")
        name, offset, size = entry
        if name in sections:
            raise SnapshotError(f"{source}: {where}: section {describe(name)} is listed twice")
        if offset % _ALIGN or not (0 <= offset and 0 <= size and offset + size <= length - start):
            raise SnapshotError(f"{source}: {where}: section {describe(name)} at {describe(offset)} of "
                                f"{describe(size)} bytes lies outside the file's {length - start} "
                                f"bytes of sections (or is not {_ALIGN}-byte aligned)")
        sections[name] = view[start + offset:start + offset + size]
        starts[name] = start + offset
    header["section_starts"] = starts
    return header, sections


def write(path: str | os.PathLike, header: Mapping[str, Any], sections: Mapping[str, bytes | memoryview],
          version: int = FORMAT_VERSION) -> None:
    """Write a whole snapshot or nothing (a3fast.files.atomic_file; the sections are written as
    they are, never joined into one copy)."""
    target = Path(path)
    parts = _parts(header, sections, version)
    parts.append(_trailer(parts))
    with atomic_file(target) as fh:
        for part in parts:
            fh.write(part)


def read(path: str | os.PathLike) -> bytes:
    """A snapshot file's bytes, read once; SnapshotError if it cannot be read, or is not a regular
    file starting with the snapshot mark (looked at before the rest is read: a file of gigabytes that
    is no snapshot, or a device, is not read into memory to find that out)."""
    try:
        with open(path, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise SnapshotError(f"{path}: not a regular file (a snapshot is a file a3fast wrote)")
            if fh.read(len(MAGIC)) != MAGIC:
                raise SnapshotError(f"{path}: not an a3fast fleet snapshot (it does not start with the "
                                    f"snapshot mark {MAGIC!r})")
            fh.seek(0)
            return fh.read()
    except OSError as exc:
        raise SnapshotUnreadable(path, exc.strerror or str(exc)) from None

"""The journal: an append-only file of framed entries, each with its length and a CRC32.

An entry is `MAGIC | length (u32 LE) | crc32(length bytes + payload) (u32 LE) | payload`. A change
is acknowledged only after its entry is flushed and fsynced (per entry, or per group of entries
written within a few milliseconds). On recovery, entries are read until the first one that does not
check out: if no valid entry follows it, that is a torn tail (a write cut short by a crash) and the
file is cut there and the cut reported; if a valid entry follows, the damage is in the middle of
acknowledged history and recovery refuses (`JournalCorrupt`), since skipping it would give a silently
wrong fleet.
"""
from __future__ import annotations

import asyncio
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

__all__ = ["MAGIC", "Journal", "JournalCorrupt", "RecoveredJournal", "frame", "read_entries"]

MAGIC = b"A3J1"
_HEADER = struct.Struct("<4sII")
#: An entry larger than this is taken for a damaged length field, never allocated.
MAX_ENTRY = 1 << 30


class JournalCorrupt(Exception):
    """Damage before the last valid entry: acknowledged history cannot be read back exactly."""


def frame(payload: bytes) -> bytes:
    length = len(payload)
    crc = zlib.crc32(payload, zlib.crc32(length.to_bytes(4, "little")))
    return _HEADER.pack(MAGIC, length, crc) + payload


def _entry_at(data: bytes | memoryview, pos: int) -> tuple[bytes, int] | None:
    """(payload, end) of a valid entry starting at `pos`, else None."""
    if pos + _HEADER.size > len(data):
        return None
    magic, length, crc = _HEADER.unpack_from(data, pos)
    if magic != MAGIC or length > MAX_ENTRY:
        return None
    end = pos + _HEADER.size + length
    if end > len(data):
        return None
    payload = bytes(data[pos + _HEADER.size:end])
    if zlib.crc32(payload, zlib.crc32(length.to_bytes(4, "little"))) != crc:
        return None
    return payload, end


@dataclass
class RecoveredJournal:
    entries: list[bytes]
    good_bytes: int          # where the last valid entry ends
    cut_bytes: int           # bytes after it (a torn tail), 0 when the file was whole


def read_entries(data: bytes, source: str = "journal") -> RecoveredJournal:
    """Every valid entry of a journal's bytes; raises JournalCorrupt for damage in the middle."""
    entries: list[bytes] = []
    pos = 0
    while pos < len(data):
        entry = _entry_at(data, pos)
        if entry is None:
            later = _next_valid(data, pos + 1)
            if later is not None:
                raise JournalCorrupt(
                    f"{source}: entry {len(entries) + 1} at byte {pos} is damaged (bad length or "
                    f"checksum) and a valid entry follows at byte {later}: acknowledged changes after "
                    f"the damage cannot be trusted; restore the state directory from a copy")
            return RecoveredJournal(entries, pos, len(data) - pos)
        entries.append(entry[0])
        pos = entry[1]
    return RecoveredJournal(entries, pos, 0)


def _next_valid(data: bytes, start: int) -> int | None:
    pos = data.find(MAGIC, start)
    while pos != -1:
        if _entry_at(data, pos) is not None:
            return pos
        pos = data.find(MAGIC, pos + 1)
    return None


def iter_file_entries(path: Path) -> Iterator[bytes]:
    yield from read_entries(path.read_bytes(), str(path)).entries


class Journal:
    """An open journal for appending. `append` writes an entry to the OS at once; `durable()` waits
    until everything appended so far is on disk: with `group=False` it fsyncs now, with
    `group=True` it joins the next group fsync, which runs in a worker thread `window` seconds after
    the first waiter so that concurrent requests share one fsync."""

    def __init__(self, path: Path, *, group: bool = False, window: float = 0.002):
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.entries = 0
        self.synced_size = self.size
        self.group = group
        self.window = window
        self._pending: asyncio.Future | None = None

    def append(self, payload: bytes) -> None:
        data = frame(payload)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self.size += len(data)
        self.entries += 1

    @property
    def lag(self) -> int:
        """Bytes appended but not yet known to be on disk."""
        return self.size - self.synced_size

    def sync(self) -> None:
        target = self.size
        os.fsync(self._fd)
        self.synced_size = max(self.synced_size, target)

    async def durable(self) -> None:
        if self.synced_size >= self.size:
            return
        if not self.group:
            self.sync()
            return
        while self.synced_size < self.size:
            if self._pending is None:
                self._pending = asyncio.get_running_loop().create_task(self._group_sync())
            await asyncio.shield(self._pending)

    async def _group_sync(self) -> None:
        try:
            await asyncio.sleep(self.window)
            target = self.size
            await asyncio.get_running_loop().run_in_executor(None, os.fsync, self._fd)
            self.synced_size = max(self.synced_size, target)
        finally:
            self._pending = None

    def reset(self) -> None:
        """Empty the journal (after a snapshot has taken in everything it held)."""
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        self.size = self.synced_size = 0
        self.entries = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1

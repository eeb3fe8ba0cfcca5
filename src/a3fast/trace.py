"""Traces (DESIGN reading 7): JSON Lines of `{"seq", "kind", "content"}` records.

Writing is append-only, one record per line, flushed per record; with `fsync=True` each record is
also forced to disk, so a crash loses at most the record being written.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

import orjson

__all__ = ["TraceWriter"]


class TraceWriter:
    """Append records to a trace. `append` returns the record's seq."""

    def __init__(self, target: str | os.PathLike | BinaryIO, *, fsync: bool = False, start_seq: int = 1):
        if isinstance(target, (str, os.PathLike)):
            self._fh: BinaryIO = open(Path(target), "ab")
            self._owned = True
        else:
            self._fh = target
            self._owned = False
        self._fsync = fsync
        self.next_seq = start_seq

    def append(self, kind: str, content: Any = None, *, content_json: bytes | None = None) -> int:
        """Write one record; `content_json` passes content already encoded as JSON bytes."""
        seq = self.next_seq
        body = content_json if content_json is not None else orjson.dumps(content)
        self._fh.write(b'{"seq":%d,"kind":%s,"content":%s}\n' % (seq, orjson.dumps(kind), body))
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())
        self.next_seq = seq + 1
        return seq

    def close(self) -> None:
        if self._owned:
            self._fh.close()

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

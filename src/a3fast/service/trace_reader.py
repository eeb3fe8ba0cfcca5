"""Reading the service's trace from a seq on: the file is JSON Lines written by TraceWriter, with
seq strictly increasing, so the first record after `since` is found by binary search over byte
offsets (no index to keep, however long the trace)."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator

__all__ = ["read_since", "offset_after", "SEQ_AT"]

#: a trace line's seq, matched at the start of the line
SEQ_AT = re.compile(rb'\{"seq":(\d+),')
CHUNK = 1 << 16


def _line_at(fh, pos: int, end: int) -> tuple[int, int | None]:
    """(start, seq) of the first whole line starting at or after `pos` (seq None past `end`)."""
    if pos > 0:
        fh.seek(pos - 1)
        # skip to the start of the next line
        while True:
            block = fh.read(4096)
            if not block:
                return end, None
            cut = block.find(b"\n")
            if cut >= 0:
                pos = fh.tell() - len(block) + cut + 1
                break
    if pos >= end:
        return end, None
    fh.seek(pos)
    match = SEQ_AT.match(fh.read(40))
    return pos, int(match.group(1)) if match else None


def offset_after(fh, since: int, end: int) -> int:
    """Byte offset of the first record whose seq is greater than `since` (`end` if none is)."""
    lo, hi = 0, end          # the smallest x whose next line start holds a later seq, or is the end
    while lo < hi:
        mid = (lo + hi) // 2
        _, seq = _line_at(fh, mid, end)
        if seq is None or seq > since:
            hi = mid
        else:
            lo = mid + 1
    return _line_at(fh, lo, end)[0]


def read_since(path: Path, since: int, end: int) -> Iterator[bytes]:
    """Chunks of the trace file from the first record after `since` up to byte `end`."""
    with open(path, "rb") as fh:
        pos = offset_after(fh, since, end) if since > 0 else 0
        fh.seek(pos)
        while pos < end:
            block = fh.read(min(CHUNK, end - pos))
            if not block:
                return
            pos += len(block)
            yield block

"""The stdio line reader is linear in its input: a 48 MB request line is answered in seconds."""
from __future__ import annotations

import subprocess
import sys
import time

import orjson
import pytest

from a3fast.service.stdio import READ_SIZE, _Lines

MB = 1_000_000


def _feed_one_line(size: int) -> float:
    """Seconds `_Lines` takes to take in one line of `size` bytes arriving READ_SIZE at a time."""
    chunk = b"x" * READ_SIZE
    lines = _Lines(size + 1)
    started = time.perf_counter()
    for _ in range(size // READ_SIZE):
        assert lines.feed(chunk) == []
    out = lines.feed(b"\n")
    elapsed = time.perf_counter() - started
    assert out == [chunk * (size // READ_SIZE)]
    return elapsed


def test_line_reader_time_grows_linearly_with_the_line():
    small = min(_feed_one_line(8 * MB) for _ in range(3))
    large = min(_feed_one_line(48 * MB) for _ in range(3))
    # linear: about 6x; rescanning the pending buffer per read (quadratic) made it about 36x
    assert large < 18 * max(small, 1e-3), (small, large)


def test_line_reader_splits_lines_across_chunks_and_drops_long_ones():
    lines = _Lines(10)
    assert lines.feed(b'{"a"') == []
    assert lines.feed(b':1}\n{"b":2}\nxx') == [b'{"a":1}', b'{"b":2}']
    assert lines.feed(b"x" * 20) == [None]                 # too long: answered 413 once
    assert lines.feed(b"yyy\n{}\n") == [b"{}"]              # its rest is dropped up to its newline
    assert lines.feed(b"tail") == [] and lines.end() == [b"tail"]


@pytest.mark.slow  # about 3 s
def test_a_48_mb_request_line_is_answered_in_seconds():
    pad = [("p" * 1000)] * (48 * MB // 1003 + 1)
    line = orjson.dumps({"op": "list_agents", "id": 1, "pad": pad}) + b"\n"
    assert len(line) > 48 * MB
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--stdio"], input=line,
                       capture_output=True, timeout=120)
    elapsed = time.perf_counter() - started
    print(f"48 MB stdio line answered in {elapsed:.2f} s (process start included)")
    assert r.returncode == 0, r.stderr
    assert orjson.loads(r.stdout) == {"id": 1, "ok": True, "names": [], "next": None}
    assert elapsed < 10        # the target is 3 s (docs/protocol.md); a quadratic reader took ~25 s

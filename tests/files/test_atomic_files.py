"""a3fast.files: every file a3fast writes whole is written whole or not at all — a temporary file
beside it, written, fsynced, renamed over it, the directory fsynced — and a special file is written
in place, never replaced."""
from __future__ import annotations

import os
import stat
import threading

import pytest

from a3fast.files import TEMP_MARK, atomic_file, remove_stale_temps, write_atomic


def test_a_file_is_written_whole_through_a_temporary_file_beside_it_in_the_named_steps(tmp_path):
    target = tmp_path / "out.json"
    target.write_bytes(b"old")
    steps = []
    write_atomic(target, b"new", step=lambda name, path: steps.append((name, path)))
    assert target.read_bytes() == b"new"
    assert steps == [("write", target), ("fsync", target), ("rename", target), ("fsync-dir", tmp_path)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_failure_while_writing_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_file(target, "w") as fh:
            fh.write("half of it")
            assert [p for p in tmp_path.iterdir() if TEMP_MARK in p.name]   # written beside it
            raise RuntimeError("stopped part-way")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_new_file_has_the_permissions_of_an_ordinary_new_file(tmp_path):
    umask = os.umask(0o027)
    try:
        write_atomic(tmp_path / "report.html", "<p>")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "report.html").stat().st_mode) == 0o640


def test_a_special_file_is_written_in_place_never_replaced(tmp_path):
    write_atomic(os.devnull, b"discarded")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    write_atomic(fifo, b"through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_temporary_file_of_a_process_that_is_gone_is_removed_and_a_live_ones_kept(tmp_path):
    gone = tmp_path / f".out.json{TEMP_MARK}{2 ** 22 + 12345}.abcdefgh"
    live = tmp_path / f".out.json{TEMP_MARK}{os.getpid()}.abcdefgh"
    gone.write_bytes(b"x")
    live.write_bytes(b"x")
    assert remove_stale_temps(tmp_path) == [gone]
    assert live.exists()

"""`files.write_pieces`: a list of byte strings written to a descriptor in order, each whole,
whatever each gathered write takes — all of it, part of a piece, nothing but empty pieces — and
with no `os.writev` at all."""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from a3fast import files

pieces_of = st.lists(st.binary(max_size=40) | st.sampled_from([b"", b"\n"]), max_size=60)


def _written(tmp_path, pieces, monkeypatch, takes=None, gathered=True):
    """The file's bytes after write_pieces, with os.writev writing at most `takes` bytes a call."""
    real_writev = os.writev
    calls = []

    def short_writev(fd, batch):
        assert len(batch) <= files._IOV_MAX
        data = b"".join(batch)
        limit = takes.pop(0) if takes else len(data)
        calls.append(len(batch))
        return real_writev(fd, [data[:min(limit, len(data))]]) if data else 0

    if gathered:
        monkeypatch.setattr(os, "writev", short_writev)
    else:
        monkeypatch.delattr(os, "writev")
    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        count = files.write_pieces(fd, pieces)
    finally:
        os.close(fd)
        monkeypatch.undo()
    return path.read_bytes(), count, calls


@settings(max_examples=150, deadline=None)
@given(pieces=pieces_of, takes=st.lists(st.integers(0, 120), max_size=30))
def test_every_piece_is_written_whole_in_order_however_little_a_writev_takes(tmp_path_factory, pieces, takes):
    tmp_path = tmp_path_factory.mktemp("pieces")
    mp = pytest.MonkeyPatch()
    data, count, _ = _written(tmp_path, pieces, mp, list(takes))
    assert data == b"".join(pieces) and count == len(data)


def test_more_pieces_than_one_writev_takes_are_written_in_several(tmp_path, monkeypatch):
    pieces = [b"%d\n" % i for i in range(3 * files._IOV_MAX + 5)]
    data, count, calls = _written(tmp_path, pieces, monkeypatch)
    assert data == b"".join(pieces) and count == len(data)
    assert len(calls) == 4 and max(calls) == files._IOV_MAX


def test_without_writev_the_pieces_are_written_one_by_one(tmp_path, monkeypatch):
    pieces = [b"a", b"", b"bc", b"def"]
    data, count, calls = _written(tmp_path, pieces, monkeypatch, gathered=False)
    assert data == b"abcdef" and count == 6 and calls == []

"""a3fast.files: the inputs a command reads — a path, or `-` for standard input — and the one
check of their kind; a3fast.errors.capped: a problem list's first 20, then a count."""
from __future__ import annotations

import ast
import io
import os
import sys
import threading
from pathlib import Path

import orjson
import pytest

import a3fast
from a3fast import files
from a3fast.errors import PROBLEMS_SHOWN, capped

PACKAGE = Path(a3fast.__file__).parent


@pytest.fixture
def stdin(monkeypatch):
    def give(data: bytes) -> None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    return give


def test_standard_input_is_one_stream_that_is_given_back_what_was_looked_at(stdin):
    stdin(b'{"seq": 1, "kind": "task.submitted", "content": {}}\n')
    assert files.require_kind("-", "trace").name == "trace"
    assert files.input_source("-") is files.input_source("-")
    assert files.read_bytes("-") == b'{"seq": 1, "kind": "task.submitted", "content": {}}\n'


def test_a_wrong_kind_an_empty_file_and_an_unreadable_one_are_input_errors(tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(orjson.dumps({"v": "1.0", "agent": {"name": "a", "namespace": "n"}}) + b"\n")
    with pytest.raises(files.InputError) as wrong:
        files.require_kind(str(fleet), "trace")
    assert wrong.value.lines == [f"{fleet} looks like declarations, not a trace"]
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert files.require_kind(str(empty), "trace").name == "empty"
    with pytest.raises(files.InputError) as told:
        files.require_kind(str(empty), "trace", allow_empty=False)
    assert told.value.lines == [f"{empty} is empty: expected a trace"]
    with pytest.raises(files.InputError) as missing:
        files.require_kind(str(tmp_path / "nope"), "trace")
    assert missing.value.lines[0].startswith(f"{tmp_path / 'nope'}: cannot read: ")


def test_read_json_names_the_file_and_the_place(tmp_path):
    path = tmp_path / "req.json"
    path.write_bytes(b'{"a": [1, }')
    with pytest.raises(files.InputError) as caught:
        files.read_json(str(path))
    assert caught.value.lines[0].startswith(f"{path}: $")


def test_problem_lists_show_the_first_20_then_a_count():
    assert capped([f"p{i}" for i in range(PROBLEMS_SHOWN)]) == [f"p{i}" for i in range(20)]
    assert capped([f"p{i}" for i in range(21)])[-1] == "… and 1 more problem"
    shown = capped(f"p{i}" for i in range(5_372))
    assert shown[:20] == [f"p{i}" for i in range(20)] and shown[20:] == ["… and 5,352 more problems"]


def _face_names() -> set[str]:
    """The names the package face binds that are not its submodules."""
    submodules = {p.name.split(".")[0] for p in PACKAGE.iterdir()
                  if p.suffix in (".py", ".so", ".pyd") or (p / "__init__.py").exists()}
    return {name for name in dir(a3fast) if not name.startswith("__") or name == "__version__"} - submodules


def test_no_module_inside_the_package_reaches_up_to_the_package_face():
    face = _face_names()
    reaching = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py" and path.parent == PACKAGE:
            continue
        depth = len(path.relative_to(PACKAGE).parts) - 1  # how many `.` lead to the package
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            top = node.module == "a3fast" or (node.level == depth + 1 and node.module is None)
            if top:
                reaching += [f"{path.relative_to(PACKAGE)}: {alias.name}" for alias in node.names
                             if alias.name in face]
    assert reaching == []


def test_a_pipe_given_by_name_is_looked_at_and_still_read_whole(tmp_path):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    data = b'{"seq": 1, "kind": "task.submitted", "content": {}}\n' * 3
    writer = threading.Thread(target=fifo.write_bytes, args=(data,))
    writer.start()
    try:
        assert files.require_kind(str(fifo), "trace").name == "trace"
        assert files.read_bytes(str(fifo)) == data
    finally:
        writer.join(timeout=10)

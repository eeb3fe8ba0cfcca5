"""A start that cannot hang: whatever a loader raises while `a3fast serve` reads its state, the
server stops with exit 2 and a message naming the file, never a traceback and never a server left
answering 503 "loading"."""
from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from a3fast import snapshot
from service_process import SECTION_10_AGENTS, Server

pytest.importorskip("starlette")


def _snapshot_named_by_checkpoint(state) -> "object":
    files = sorted(p for p in state.iterdir() if p.name.endswith(".a3snap"))
    assert len(files) == 1, [p.name for p in state.iterdir()]
    return files[0]


def test_any_loader_failure_stops_the_start_with_exit_2_naming_the_file(tmp_path):
    state = tmp_path / "state"
    first = Server("--state", str(state))
    for agent in SECTION_10_AGENTS:
        assert first.client.put(f"/v1/agents/{agent['agent']['name']}", json=agent).status_code in (200, 201)
    assert first.stop() == 0
    path = _snapshot_named_by_checkpoint(state)
    header, sections = snapshot.decode(path.read_bytes(), str(path))
    header.pop("section_starts")
    # a whole, checksummed snapshot of the right content whose predicate rows are not the mapping
    # a fleet's are: the fleet's reader meets a shape it has no check for
    header["field_rows"] = [list(entries) for entries in header["field_rows"].values()]
    snapshot.write(path, header, {name: bytes(view) for name, view in sections.items()})
    try:
        run = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--port", "0", "--state", str(state)],
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the server kept running (answering 503 'loading') after its loader failed")
    assert run.returncode == 2, run.stderr
    assert str(path) in run.stderr and "cannot start" in run.stderr
    assert "Traceback" not in run.stderr

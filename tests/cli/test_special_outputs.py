"""An output path that is not a regular file (/dev/null, a FIFO) is written in place: a temporary
file renamed over it would replace the device or the pipe with a plain file."""
from __future__ import annotations

import os
import stat
import threading

import orjson
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.cli.common import atomic_outputs
from service_process import SECTION_10_AGENTS, SECTION_10_TASK


def _drain(path, out):
    with open(path, "rb") as fh:
        out.append(fh.read())


def test_a_fifo_output_is_written_into_the_pipe_and_stays_a_pipe(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(fifo, got))
    reader.start()
    with atomic_outputs([str(fifo), str(tmp_path / "plain.txt")]) as (special, plain):
        special.write(b"into the pipe\n")
        plain.write(b"into a file\n")
    reader.join(timeout=10)
    assert got == [b"into the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert (tmp_path / "plain.txt").read_bytes() == b"into a file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "plain.txt"]


def test_a_command_writing_to_a_fifo_leaves_it_a_fifo(tmp_path):
    fleet, task, fifo = tmp_path / "fleet.jsonl", tmp_path / "task.json", tmp_path / "trace"
    fleet.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in SECTION_10_AGENTS))
    task.write_bytes(orjson.dumps(SECTION_10_TASK))
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(fifo, got))
    reader.start()
    result = CliRunner().invoke(main, ["place", "--fleet", str(fleet), "--requirements", str(task),
                                       "-o", str(fifo)])
    reader.join(timeout=10)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [orjson.loads(line)["kind"] for line in got[0].splitlines()] == \
        ["task.submitted", "task.admitted", "task.bound"]

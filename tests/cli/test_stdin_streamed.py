"""Standard input is streamed: a command given `-` holds no more of the trace than it does given
the file (a3fast.files, a3fast.framing). Measured as the peak RSS of the command's process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from a3fast.trace import TraceWriter
from a3fast.workload import generate_fleet, generate_tasks

from factories import fleet_of

SRC = Path(__file__).resolve().parents[2] / "src"

_PEAK = """
import resource, subprocess, sys
args, stdin = sys.argv[1:-1], sys.argv[-1]
with open(stdin, "rb") if stdin != "none" else open("/dev/null", "rb") as given:
    done = subprocess.run(args, stdin=given, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.stderr.write(done.stderr.decode())
"""


def peak_kib(args: list[str], stdin: Path | None = None) -> int:
    """The peak RSS of `a3fast ARGS` run in a process of its own (with `stdin` piped in)."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, "-m", "a3fast", *args,
                           str(stdin) if stdin is not None else "none"],
                          capture_output=True, text=True, env=env, timeout=600)
    code, peak = map(int, done.stdout.split())
    assert code in (0, 1), done.stderr
    return peak


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("streamed")
    declarations = generate_fleet(300, seed=1)
    fleet_path = folder / "fleet.jsonl"
    fleet_path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in declarations))
    fleet = fleet_of(None, declarations, batch=True)
    path = folder / "trace.jsonl"
    with TraceWriter(path) as writer:
        for task in generate_tasks(declarations, 1500, seed=2):
            writer.write(fleet.place(task))
    return path, fleet_path


@pytest.mark.slow  # writes a 30 MB trace and replays it twice: tens of seconds on the shared machine
def test_replay_holds_no_more_of_a_trace_from_standard_input_than_from_its_file(trace):
    path, fleet = trace
    size_kib = path.stat().st_size // 1024
    assert size_kib > 20 * 1024
    from_file = peak_kib(["replay", str(path), "--fleet", str(fleet)])
    from_stdin = peak_kib(["replay", "-", "--fleet", str(fleet)], stdin=path)
    # read whole, standard input would cost the trace's size again (and more) on top
    assert from_stdin < from_file + size_kib // 4, (from_stdin, from_file, size_kib)


@pytest.mark.slow  # verifies the 30 MB trace twice
def test_verify_holds_no_more_of_a_trace_from_standard_input_than_from_its_file(trace):
    path, _ = trace
    size_kib = path.stat().st_size // 1024
    from_file = peak_kib(["verify", str(path)])
    from_stdin = peak_kib(["verify", "-"], stdin=path)
    assert from_stdin < from_file + size_kib // 4, (from_stdin, from_file, size_kib)

"""SIGTERM and SIGINT stop `a3fast serve --stdio` cleanly (docs/service.md: "in-flight requests
finish"): the batch being answered is finished and every answer of it written, so the trace holds
exactly the placements the client was answered; a service waiting for input stops at once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import orjson
import pytest

from a3fast.workload import generate_fleet, generate_tasks


def _serve(tmp_path, durable: bool) -> subprocess.Popen:
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in generate_fleet(200, 3)))
    where = ["--state", str(tmp_path / "state")] if durable else ["--trace", str(tmp_path / "trace.jsonl")]
    return subprocess.Popen([sys.executable, "-m", "a3fast", "serve", "--stdio", "--fleet", str(fleet), *where],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _placements_in_trace(tmp_path, durable: bool) -> int:
    trace = tmp_path / "state" / "trace.jsonl" if durable else tmp_path / "trace.jsonl"
    return trace.read_bytes().count(b'"kind":"task.submitted"')


def _ready(process: subprocess.Popen) -> None:
    # the first answer says the fleet is loaded and the service reads its input
    process.stdin.write(b'{"op":"list_agents","id":"ready","limit":1}\n')
    process.stdin.flush()
    assert orjson.loads(process.stdout.readline())["id"] == "ready"


@pytest.mark.parametrize("durable", [False, True], ids=["plain", "--state"])
@pytest.mark.parametrize("delay", [0.05, 0.3])
def test_a_stop_during_placements_answers_every_placement_it_made(tmp_path, durable, delay):
    tasks = generate_tasks(generate_fleet(200, 3), 300, 4) * 100       # 30,000 placements
    body = b"".join(orjson.dumps({"op": "place", "id": i, "requirements": t, "record": "compact"}) + b"\n"
                    for i, t in enumerate(tasks))
    process = _serve(tmp_path, durable)
    out: list[bytes] = []
    _ready(process)
    reading = threading.Thread(target=lambda: out.append(process.stdout.read()))
    reading.start()

    def write() -> None:
        try:
            process.stdin.write(body)
            process.stdin.close()
        except BrokenPipeError:      # stopped before it read everything: those lines are not answered
            pass
    writing = threading.Thread(target=write)
    writing.start()
    time.sleep(delay)
    process.send_signal(signal.SIGTERM)
    code = process.wait(120)
    reading.join()
    writing.join(30)
    answers = [orjson.loads(line) for line in out[0].splitlines()]
    # a service that answered all its input before the signal came may be ending already, past
    # where a stop is handled (the interpreter's own end puts the default handler back)
    assert code == 0 or (code == -signal.SIGTERM and len(answers) == len(tasks)), \
        (code, process.stderr.read().decode()[-2000:])
    assert len(answers) < len(tasks) or delay > 0.1     # the stop came during the placements
    assert all(a["ok"] for a in answers), [a for a in answers if not a["ok"]][:3]
    assert [a["id"] for a in answers] == list(range(len(answers)))
    assert _placements_in_trace(tmp_path, durable) == len(answers)
    assert b"Traceback" not in process.stderr.read()


@pytest.mark.parametrize("durable", [False, True], ids=["plain", "--state"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_service_waiting_for_input_stops_at_once(tmp_path, durable, sig):
    process = _serve(tmp_path, durable)
    try:
        _ready(process)
        started = time.monotonic()
        process.send_signal(sig)          # standard input stays open: no more input is coming
        assert process.wait(30) == 0
        assert time.monotonic() - started < 10
        assert b"Traceback" not in process.stderr.read()
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

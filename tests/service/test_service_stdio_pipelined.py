"""Pipelined stdio: requests that arrive together are answered together, consecutive placements of
a batch through the fleet's batch path, with exactly the answers, records and trace of one request
at a time (measured timings aside)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from a3fast.service.operations import Operations
from a3fast.service.state import ServiceState
from a3fast.service.stdio import answer_batch, serve_stdio_sync
from a3fast.workload import generate_fleet, generate_tasks

_TIMINGS = re.compile(rb',?"timings":\{[^{}]*\}')


def without_timings(data: bytes) -> bytes:
    """Answers with the §6 `timings` members (measured, so never equal twice) taken out."""
    return _TIMINGS.sub(b"", data)


def _request_stream() -> list[bytes]:
    """Every kind of neighbour a placement can have in one batch: distinct sessions, a session
    placed twice, a route, refused requests, an update between placements, every record form."""
    fleet = generate_fleet(40, seed=3)
    tasks = generate_tasks(fleet, 30, seed=4)
    lines = [{"op": "put_agents", "id": "load", "declarations": fleet}]
    for i, task in enumerate(tasks):
        place = {"op": "place", "id": i, "requirements": task, "record": ("spec", "compact", "compact-stream")[i % 3]}
        if i % 4 == 1:
            place["session"] = f"s{i % 7}"          # repeats every 7: the same session twice
        if i == 9:
            place["route"] = {"name": "strict", "adds": {"clearances": ["audit.read"]}}
        lines.append(place)
        if i == 3:       # the second is scored with the affinity the first one's hold gives
            for n in range(2):
                lines.append({"op": "place", "id": f"twice-{n}", "requirements": task,
                              "session": "twice", "record": "compact"})
        if i == 5:      # each answer counts what it and the requests before it recorded, no more
            for n, success in enumerate((True, False)):
                lines.append({"op": "outcome", "id": f"outcome-{n}", "agent": fleet[0]["agent"]["name"],
                              "kind": "k", "success": success})
            lines.append({"op": "trace", "id": "trace-mid"})        # the records so far, not the next ones
        if i == 12:
            lines.append({"op": "hold_session", "id": "hold", "agent": fleet[0]["agent"]["name"],
                          "session": "s3"})
        if i == 17:
            lines.append({"op": "place", "id": "bad", "requirements": {"capabilities": 7}})
            lines.append({"op": "place", "id": "bad-record", "requirements": task, "record": "x"})
        if i == 21:
            lines.append({"op": "delete_agent", "id": "gone", "name": fleet[1]["agent"]["name"]})
    lines.append({"op": "trace", "id": "trace"})
    return [orjson.dumps(line) for line in lines] + [b"not json", b'{"op": "nope", "id": "nope"}']


def _served(trace: Path, lines: list[bytes], together: bool, *extra: str) -> bytes:
    """The answers of `a3fast serve --stdio` to `lines`: all written at once, or one written only
    after the answer to the one before it has been read."""
    command = [sys.executable, "-m", "a3fast", "serve", "--stdio", "--trace", str(trace), *extra]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    answers = []
    if together:
        out, err = proc.communicate(b"\n".join(lines) + b"\n", timeout=120)
        assert proc.returncode == 0, err
        return out
    for line in lines:
        proc.stdin.write(line + b"\n")
        proc.stdin.flush()
        answers.append(proc.stdout.readline())
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return b"".join(answers)


@pytest.fixture(scope="module", params=["no-journal", "journal", "checkpoints"])
def both_ways(request, tmp_path_factory) -> tuple[bytes, bytes, bytes, bytes]:
    """The stream answered both ways: without a state directory (the loop without an event loop),
    with one (the event loop, each batch sharing a journal commit), and with a checkpoint every
    few changes (a checkpoint's sync inside a batch makes a later step's entries durable before
    an earlier step's commit has woken it)."""
    tmp = tmp_path_factory.mktemp("pipelined")
    lines = _request_stream()
    def state(name: str) -> tuple[str, ...]:
        if request.param == "no-journal":
            return ()
        every = ("--checkpoint-every", "5") if request.param == "checkpoints" else ()
        return ("--state", str(tmp / name), "--fsync", "never", *every)
    alone = _served(tmp / "alone.jsonl", lines, False, *state("alone"))
    together = _served(tmp / "together.jsonl", lines, True, *state("together"))
    return alone, together, (tmp / "alone.jsonl").read_bytes(), (tmp / "together.jsonl").read_bytes()


def test_pipelined_answers_are_those_of_one_request_at_a_time(both_ways):
    alone, together, _, _ = both_ways
    assert len(alone.splitlines()) == len(_request_stream())
    assert without_timings(together) == without_timings(alone)


def test_pipelined_trace_file_is_that_of_one_request_at_a_time(both_ways):
    _, _, alone_trace, together_trace = both_ways
    assert alone_trace.count(b"\n") > 60
    assert without_timings(together_trace) == without_timings(alone_trace)


def test_pipelined_stream_holds_every_neighbour_of_a_placement(both_ways):
    """The differential test covers what it says: refusals, a route, an update, sessions."""
    alone, _, _, _ = both_ways
    answers = {a.get("id"): a for a in map(orjson.loads, alone.splitlines())}
    assert answers["bad"]["status"] == 400 and answers["bad-record"]["status"] == 400
    assert answers["hold"]["ok"] and answers["gone"]["ok"] and answers[9]["ok"]
    assert [answers[f"outcome-{n}"]["attempts"] for n in range(2)] == [1, 2]
    assert answers["trace-mid"]["records"] and answers["trace-mid"]["records"][-1]["seq"] < \
        answers[6]["records"][0]["seq"]
    assert answers["nope"]["status"] == 400 and answers[None]["status"] == 400
    bound = [i for i, a in answers.items() if isinstance(i, int) and i < 30
             and any(r["kind"] == "task.bound" for r in a["records"])]
    assert any(i % 4 == 1 for i in bound), "no placement with a session was bound"


class _CountingFleet:
    """The served fleet, counting the batch calls the service makes of it."""

    def __init__(self, fleet):
        self._fleet = fleet
        self.batches: list[int] = []

    def place_many(self, tasks, **kw):
        tasks = list(tasks)
        self.batches.append(len(tasks))
        return self._fleet.place_many(tasks, **kw)

    def __getattr__(self, name):
        return getattr(self._fleet, name)

    def __contains__(self, name):
        return name in self._fleet

    def __len__(self):
        return len(self._fleet)


def test_consecutive_placements_of_a_batch_go_through_the_batch_path(tmp_path):
    """Runs end at a route and at a session's second task; distinct sessions share one run."""
    state = ServiceState(trace_path=tmp_path / "trace.jsonl")
    state.open()
    try:
        ops = Operations(state)
        fleet = generate_fleet(20, seed=1)
        tasks = generate_tasks(fleet, 8, seed=2)
        serve_stdio_sync(ops, _Input([orjson.dumps({"op": "put_agents", "declarations": fleet})]),
                         _Output(), 1 << 24)
        counting = _CountingFleet(state.fleet)
        state.fleet = counting
        sessions = ["a", "b", None, "a", "c", None, None, None]
        lines = [orjson.dumps({"op": "place", "id": i, "requirements": t, "record": "compact",
                               **({"session": s} if s else {}),
                               **({"route": {"name": "r", "adds": {"clearances": ["audit.read"]}}} if i == 6 else {})})
                 for i, (t, s) in enumerate(zip(tasks, sessions))]
        out = _now(answer_batch(ops, lines))
        assert [orjson.loads(a)["id"] for a in out] == list(range(8))
        assert all(orjson.loads(a)["ok"] for a in out)
        assert counting.batches == [3, 3, 1]     # [a b -] [a c -] (route alone) [-]
    finally:
        state.close()


def _now(coro):
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("a stdio batch without a journal waited")


class _Input:
    def __init__(self, lines: list[bytes]):
        self.data = [b"\n".join(lines) + b"\n", b""]

    def read(self, _size: int) -> bytes:
        return self.data.pop(0)


class _Output:
    def __init__(self):
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    def flush(self) -> None:
        pass

"""Playing worlds through one matcher under test, and judging each of its placements.

A session keeps one matcher process across worlds (resetting its fleet by deleting the agents the
previous world left), and starts a new one after the matcher crashed or was stopped for a timeout.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import takewhile
from typing import Any

import orjson

from .. import process_groups

from .checks import Expected, check_placement, expected_placement, from_vector
from .client import PIPELINE_WINDOW, MatcherFailure, MatcherProcess, echoes
from .worlds import World, live_fleet

__all__ = ["Failure", "Session"]


@dataclass
class Failure:
    """The first wrong placement of a world: `placement` counts placements from 1, `step` the
    world's steps from 1; `differences` are (check, what) pairs — for a matcher that could not
    answer, one pair (the MatcherFailure's kind, its message)."""

    world: World
    placement: int
    step: int
    differences: list[tuple[str, str]]
    #: set by the shrinker: the failure does not show when the world is played on a new process
    unreproducible: bool = False

    @property
    def check(self) -> str:
        return self.differences[0][0]

    def describe(self) -> str:
        what = "; ".join(f"{check}: {text}" for check, text in self.differences)
        return f"{self.world.label}, placement {self.placement} (step {self.step}): {what}"


class Session:
    def __init__(self, command: str, timeout: float):
        self.command = command
        self.timeout = timeout
        self.process: MatcherProcess | None = None
        self.live: set[str] = set()
        self.bulk = True            # the matcher takes put_agents (else put_agent, one at a time)
        self.placements = 0         # placements judged, over every world played
        self.fresh = False          # play each world on a new process (the shrinker's slow mode)

    def start(self) -> MatcherProcess:
        """The running matcher (started now if it is not); MatcherFailure("start") if it cannot be."""
        if self.process is None or process_groups.exited(self.process.proc):
            if self.process is not None:
                self.process.close()
            self.process = MatcherProcess(self.command, self.timeout)
            self.live = set()
        return self.process

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
            self.process = None

    def play(self, world: World) -> Failure | None:
        """Run the world from an empty fleet; the first wrong placement, or None."""
        placement = 0
        step = 0
        try:
            if self.fresh:
                self.close()
            matcher = self.start()
            self._reset(matcher)
            steps = list(enumerate(world.steps, 1))
            at = 0
            while at < len(steps):
                step, (kind, arg) = steps[at]
                if kind == "put":
                    self._put(matcher, arg)
                elif kind == "delete":
                    matcher.request("delete_agent", name=arg)
                    self.live.discard(arg)
                else:
                    # consecutive placements change nothing the next one sees: sent pipelined, a
                    # window at a time, and checked in order as one at a time
                    run = list(takewhile(lambda s: s[1][0] == "place", steps[at:at + PIPELINE_WINDOW]))
                    lines = matcher.request_lines_pipelined("place", [{"requirements": a} for _, (_, a) in run])
                    for (step, (_, arg)), (rid, line) in zip(run, lines):
                        placement += 1
                        answer = _place_answer(rid, line)
                        self.placements += 1
                        differences = check_placement(answer.get("records"), set(self.live),
                                                      self._expected(world, placement, step, arg))
                        if differences:
                            return Failure(world, placement, step, differences)
                    at += len(run)
                    continue
                at += 1
            # the world is over once its fleet is cleared: a matcher that died after its last
            # answer (a crash, a non-zero exit) fails this world, not the next one it would have
            # been blamed on, and not never; one that ended by itself with exit 0 is started again
            self._reset(matcher)
            if process_groups.exited(matcher.proc):
                failure = matcher.exited("after the world's last request")
                if matcher.proc.returncode != 0:
                    raise failure
        except MatcherFailure as exc:
            if exc.kind in ("timeout", "crashed", "malformed"):
                self.close()      # its state, or its place in the conversation, is lost
            return Failure(world, placement or 1, step or 1, [(exc.kind, exc.message)])
        return None

    def _expected(self, world: World, placement: int, step: int, requirements: Any) -> Expected:
        stated = world.expected.get(placement - 1)
        if stated is not None:
            return from_vector(stated)
        return expected_placement(live_fleet(world.steps[:step]), requirements)

    def _put(self, matcher: MatcherProcess, declarations: list[dict[str, Any]]) -> None:
        if not declarations:
            return
        if self.bulk:
            answer = matcher.request("put_agents", check=False, declarations=declarations)
            if answer.get("ok") is True:
                self.live.update(d["agent"]["name"] for d in declarations)
                return
            if not _unknown_op(answer):
                raise MatcherFailure("refused", f"put_agents was refused: {answer.get('problems')}")
            self.bulk = False
        for doc in declarations:
            matcher.request("put_agent", name=doc["agent"]["name"], declaration=doc)
            self.live.add(doc["agent"]["name"])

    def _reset(self, matcher: MatcherProcess) -> None:
        for name in sorted(self.live):
            matcher.request("delete_agent", name=name)
        self.live = set()


def _place_answer(rid: int, line: bytes) -> dict[str, Any]:
    """A place answer read as `MatcherProcess.request` reads one: JSON, an object, the request's
    id, ok."""
    try:
        answer = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise MatcherFailure("malformed", f"the answer to a place request is not JSON ({exc}): "
                             f"{line[:200].decode('utf-8', 'replace')}") from None
    if not isinstance(answer, dict):
        raise MatcherFailure("malformed", "the answer to a place request is not a JSON object: "
                             f"{line[:200].decode('utf-8', 'replace')}")
    if not echoes(answer.get("id"), rid):
        raise MatcherFailure("malformed", f"the answer to place request {rid} carries id "
                             f"{answer.get('id')!r}: answers must echo the request's id, in order")
    if answer.get("ok") is not True:
        raise MatcherFailure("refused", f"place was refused: {line[:200].decode('utf-8', 'replace')}")
    return answer


def _unknown_op(answer: dict[str, Any]) -> bool:
    problems = answer.get("problems")
    return isinstance(problems, list) and any(isinstance(p, dict) and p.get("path") == "$.op"
                                              for p in problems)

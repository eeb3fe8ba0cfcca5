"""The C reference matcher (examples/matchers/c/): built with the system compiler and jansson, it
passes the matching suite over the stdio protocol, and its deliberately wrong mode is caught with the
first wrong placement named. Without a C compiler the tests are skipped, unless CI is set: there a
missing compiler or jansson fails them."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.harness.client import MatcherProcess

SOURCE = Path(__file__).resolve().parents[2] / "examples" / "matchers" / "c"


def _compiler() -> str | None:
    for name in filter(None, (os.environ.get("CC"), "cc", "gcc", "clang")):
        if shutil.which(name):
            return name
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must build the C matcher: {reason}")
    pytest.skip(f"NOT TESTED: the C reference matcher cannot be built here: {reason}")


@pytest.fixture(scope="module")
def c_matcher(tmp_path_factory) -> str:
    """The path of a freshly built matcher binary."""
    compiler = _compiler()
    if compiler is None:
        _unavailable("no C compiler (cc, gcc or clang) on PATH")
    if shutil.which("make") is None:
        _unavailable("no make on PATH")
    out = tmp_path_factory.mktemp("c-matcher") / "matcher"
    built = subprocess.run(["make", "-s", "-C", str(SOURCE), f"OUT={out}", f"CC={compiler}"],
                           capture_output=True, text=True, timeout=120)
    if built.returncode != 0:
        if "jansson.h" in built.stderr:
            _unavailable("jansson's headers are missing (apt-get install libjansson-dev)")
        pytest.fail(f"the C matcher does not build:\n{built.stderr}")
    return str(out)


def conformance(*args: str):
    return CliRunner().invoke(main, ["conformance", "--suite", "matching", *args])


def test_the_c_reference_matcher_passes_the_matching_suite(c_matcher):
    result = conformance("--matcher", c_matcher, "--worlds", "100", "--seed", "3")
    assert result.exit_code == 0, result.output
    assert re.search(r"^113 passed, 0 failed$", result.output, re.M)


def test_the_c_matcher_with_residency_ignored_fails_naming_the_first_wrong_placement(c_matcher):
    result = conformance("--matcher", f"{c_matcher} --wrong residency", "--worlds", "12")
    assert result.exit_code == 1, result.output
    first = next(line for line in result.output.splitlines() if line.startswith("FAIL "))
    assert re.match(r"FAIL .+, placement \d+ \(step \d+\): filters_failed: missing \S+ failing residency:", first)
    world = next(line for line in result.output.splitlines() if line.startswith("  world: "))
    steps = orjson.loads(world[len("  world: "):])
    assert [s["op"] for s in steps] == ["put", "place"] and "residency" in steps[1]["requirements"]


def test_the_c_matcher_lists_filters_failed_grouped_by_predicate_then_candidate_order(c_matcher):
    def agent(name, capabilities, clearances):
        return {"v": "1.0", "agent": {"name": name, "namespace": "t"}, "clearances": clearances,
                "capabilities": [{"name": c, "version": 1} for c in capabilities]}

    fleet = [agent("d", [], []), agent("c", ["a.b"], []), agent("b", [], ["x.y"]), agent("a", ["a.b"], [])]
    with MatcherProcess(c_matcher, timeout=10) as m:
        m.request("put_agents", declarations=fleet)
        answer = m.request("place", requirements={"v": "1.0", "capabilities": [{"name": "a.b", "version": 1}],
                                                  "clearances": ["x.y"]})
    rejected = answer["records"][-1]["content"]
    assert answer["records"][-1]["kind"] == "task.rejected"
    assert rejected["candidates"] == ["d", "c", "b", "a"]
    assert [(f["predicate"], f["candidate"]) for f in rejected["filters_failed"]] == [
        ("capability:a.b/1", "d"), ("capability:a.b/1", "b"), ("clearance:x.y", "c"), ("clearance:x.y", "a")]
    assert "capability:a.b/1 failed by d, b; clearance:x.y failed by c, a" in rejected["reason"]


def test_the_c_matcher_refuses_bad_requests_with_a_problem_and_carries_on(c_matcher):
    with MatcherProcess(c_matcher, timeout=10) as m:
        m.send({"op": "fly", "id": 1})
        assert m.receive() == {"id": 1, "ok": False, "status": 400, "problems": [{
            "path": "$.op", "expected": "put_agent, put_agents, delete_agent, place or outcome", "found": "fly"}]}
        gone = m.request("delete_agent", check=False, name="nobody")
        assert (gone["ok"], gone["status"], gone["problems"][0]["path"]) == (False, 404, "$.name")
        assert m.request("put_agents", declarations=[])["count"] == 0


def test_the_c_matcher_rejects_an_unknown_flag_with_exit_code_2(c_matcher):
    run = subprocess.run([c_matcher, "--wrong", "everything"], capture_output=True, text=True, timeout=10)
    assert run.returncode == 2 and "usage: matcher" in run.stderr

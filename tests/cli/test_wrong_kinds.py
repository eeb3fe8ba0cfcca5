"""Mistakes told once: every command that takes a file, given a file of another kind a3fast writes,
says in one line what the file looks like and what it expected, exit 2 (a3fast.kinds,
a3fast.files.require_kind); and a list of problems shows the first 20, then counts the rest."""
from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.durable.journal import frame
from a3fast.record.compact import Encoder
from a3fast.trace import TraceWriter

from factories import declaration, fleet_of, requirements

ROOT = Path(__file__).resolve().parents[2]
AUTHORITY = ROOT / "examples" / "authority"
LISTING = ROOT / "tests" / "data" / "interop" / "listings" / "page1.json"
CAPABILITY_VECTORS = ROOT / "vectors" / "capability-schema"
MATCHING_VECTORS = ROOT / "vectors" / "matching"

#: kind -> (file name, what the one line says it looks like)
KINDS = {
    "declarations": ("fleet.jsonl", "declarations"),
    "requirements": ("req.json", "requirements"),
    "spec trace": ("spec.jsonl", "a trace (spec records)"),
    "compact trace": ("compact.jsonl", "a trace (compact records)"),
    "snapshot": ("fleet.a3f", "a fleet snapshot"),
    "journal": ("journal.a3j", "a service journal"),
    "vectors": ("vectors.json", "conformance vectors"),
    "matching vectors": ("matching.json", "matching vectors"),
}


@pytest.fixture(scope="module")
def kinds(tmp_path_factory) -> Path:
    """One file of every kind a3fast writes, made the way a3fast makes it."""
    folder = tmp_path_factory.mktemp("kinds")
    decls = [declaration("a", capabilities=[("x.y", 1)], clearances=["r.read"]),
             declaration("b", capabilities=[("x.y", 1)])]
    (folder / "fleet.jsonl").write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in decls))
    req = requirements(capabilities=["x.y/1"])
    (folder / "req.json").write_bytes(orjson.dumps(req))
    fleet = fleet_of(None, decls)
    for form, name in (("spec", "spec.jsonl"), ("compact", "compact.jsonl")):
        with TraceWriter(folder / name, form=form) as writer:
            writer.write(fleet.place(req))
    fleet.save(folder / "fleet.a3f")
    (folder / "journal.a3j").write_bytes(frame(b'{"op": "add"}'))
    shutil.copy(next(p for p in sorted(CAPABILITY_VECTORS.glob("*.json")) if p.name != "schema.json"),
                folder / "vectors.json")
    shutil.copy(sorted(MATCHING_VECTORS.glob("*.json"))[0], folder / "matching.json")
    return folder


def authority(slot: str, path: str) -> list[str]:
    args = []
    for option in ("contracts", "mappings", "skills", "connection", "engagement", "policy"):
        args += [f"--{option}", path if option == slot else str(AUTHORITY / f"{option}.json")]
    return ["resolve", *args]


#: command -> (how to run it with FILE in the slot under test, the kinds that slot reads)
COMMANDS = {
    "place --fleet": (lambda f, k: ["place", "--fleet", f, "--requirements", str(k / "req.json")], {"declarations"}),
    "place --requirements": (lambda f, k: ["place", "--fleet", str(k / "fleet.jsonl"), "--requirements", f],
                             {"requirements"}),
    "explain TRACE": (lambda f, k: ["explain", f], {"spec trace", "compact trace"}),
    "explain --fleet": (lambda f, k: ["explain", str(k / "spec.jsonl"), "--seq", "3", "--all-failed",
                                      "--fleet", f], {"declarations"}),
    "verify": (lambda f, k: ["verify", f], {"spec trace", "compact trace"}),
    "report": (lambda f, k: ["report", f, "-o", str(k / "out.html")], {"spec trace", "compact trace"}),
    "replay TRACE": (lambda f, k: ["replay", f, "--fleet", str(k / "fleet.jsonl")], {"spec trace", "compact trace"}),
    "replay --fleet": (lambda f, k: ["replay", str(k / "spec.jsonl"), "--fleet", f], {"declarations", "snapshot"}),
    "encode": (lambda f, k: ["encode", f], {"spec trace", "compact trace"}),
    "decode": (lambda f, k: ["decode", f], {"spec trace", "compact trace"}),
    "gen-tasks --fleet": (lambda f, k: ["gen-tasks", "--fleet", f, "--tasks", "1"], {"declarations"}),
    "serve --fleet": (lambda f, k: ["serve", "--stdio", "--fleet", f], {"declarations"}),
    "import a2a": (lambda f, k: ["import", "a2a", f, "--namespace", "n", "--capability-version", "1"], set()),
    "import oasf": (lambda f, k: ["import", "oasf", f, "--namespace", "n"], set()),
    "import k8s": (lambda f, k: ["import", "k8s", f], set()),
    "import mcp": (lambda f, k: ["import", "mcp", f, "--bind", "a", "--fleet", str(k / "fleet.jsonl")], set()),
    "import mcp --fleet": (lambda f, k: ["import", "mcp", str(LISTING), "--bind", "a", "--fleet", f],
                           {"declarations"}),
    "resolve --contracts": (lambda f, k: authority("contracts", f), set()),
    "resolve --connection": (lambda f, k: authority("connection", f), set()),
    "resolve --engagement": (lambda f, k: authority("engagement", f), set()),
}

CASES = [(command, kind) for command, (_, accepted) in COMMANDS.items() for kind in KINDS if kind not in accepted]


def run(args: list[str], input: bytes | None = None):
    return CliRunner().invoke(main, args, input=input, catch_exceptions=False)


@pytest.mark.parametrize("command,kind", CASES, ids=[f"{c}:{k}" for c, k in CASES])
def test_a_file_of_another_kind_is_told_in_one_line(kinds, command, kind):
    name, looks_like = KINDS[kind]
    path = str(kinds / name)
    result = run(COMMANDS[command][0](path, kinds))
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"a3fast: {path} looks like {looks_like}, not "
                                          + result.stderr.split(", not ", 1)[1].rstrip("\n")]
    assert result.stdout == ""


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "vectors"])
def test_conformance_tells_a_file_of_another_kind_among_the_vectors(kinds, tmp_path, kind):
    suite = tmp_path / "capability-schema"
    shutil.copytree(CAPABILITY_VECTORS, suite)
    name, looks_like = KINDS[kind]
    shutil.copy(kinds / name, suite / "wrong.json")
    result = run(["conformance", "--vectors", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"a3fast: {suite / 'wrong.json'} looks like {looks_like}, "
                                          f"not conformance vectors"]


def test_the_matching_suite_tells_verifier_vectors_among_its_own(kinds, tmp_path):
    suite = tmp_path / "matching"
    shutil.copytree(MATCHING_VECTORS, suite)
    shutil.copy(kinds / "vectors.json", suite / "wrong.json")
    result = run(["conformance", "--suite", "matching", "--vectors", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"a3fast: {suite / 'wrong.json'} looks like conformance vectors, "
                                          f"not matching vectors"]


def test_what_the_one_line_names_as_expected(kinds):
    trace = str(kinds / "spec.jsonl")
    assert run(["place", "--fleet", trace, "--requirements", str(kinds / "req.json")]).stderr == \
        f"a3fast: {trace} looks like a trace (spec records), not declarations\n"
    fleet = str(kinds / "fleet.jsonl")
    assert run(["verify", fleet]).stderr == f"a3fast: {fleet} looks like declarations, not a trace\n"
    assert run(["import", "a2a", trace, "--namespace", "n", "--capability-version", "1"]).stderr == \
        f"a3fast: {trace} looks like a trace (spec records), not A2A agent cards\n"


def test_standard_input_of_another_kind_is_told_and_the_right_kind_still_read_whole(kinds):
    trace = (kinds / "spec.jsonl").read_bytes()
    result = run(["place", "--fleet", "-", "--requirements", str(kinds / "req.json")], input=trace)
    assert (result.exit_code, result.stderr) == \
        (2, "a3fast: standard input looks like a trace (spec records), not declarations\n")
    # a trace on standard input is looked at, given back, and verified from its first record
    result = run(["verify", "-", "--json"], input=trace)
    assert result.exit_code == 0 and orjson.loads(result.stdout)["records"] == trace.count(b"\n")
    fleet = (kinds / "fleet.jsonl").read_bytes()
    result = run(["place", "--fleet", "-", "--requirements", str(kinds / "req.json")], input=fleet)
    assert result.exit_code == 0 and b'"agent":{"name":"a"' in result.stdout_bytes


def test_a_file_of_no_kind_a3fast_writes_is_left_to_its_reader(tmp_path, kinds):
    card = tmp_path / "card.json"
    card.write_bytes(orjson.dumps({"name": "x", "description": "y", "skills": 3}))
    result = run(["place", "--fleet", str(card), "--requirements", str(kinds / "req.json")])
    assert result.exit_code == 2 and "looks like" not in result.stderr
    assert "line 1: $" in result.stderr


def test_a_declaration_without_its_agent_is_named_so_not_taken_for_requirements(tmp_path, kinds):
    # its residency is a list of labels, which no task's is: the declarations' reader names the slip
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(orjson.dumps({"v": "1.0", "capabilities": [{"name": "a.b", "version": 1}], "clearances": [],
                                    "residency": ["eu"], "model": {"latency_class": "batch"}}) + b"\n")
    result = run(["place", "--fleet", str(fleet), "--requirements", str(kinds / "req.json")])
    assert result.exit_code == 2 and "looks like" not in result.stderr
    assert f"a3fast: {fleet}: line 1: $.agent: expected the required field 'agent'" in result.stderr


def test_a_list_of_problems_shows_the_first_20_then_counts_the_rest(tmp_path, kinds):
    broken = tmp_path / "fleet.jsonl"
    broken.write_bytes(b"".join(orjson.dumps({"v": "1.0", "agent": {"name": i}}) + b"\n" for i in range(60)))
    result = run(["place", "--fleet", str(broken), "--requirements", str(kinds / "req.json")])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 21
    assert all(line.startswith(f"a3fast: {broken}: line ") for line in lines[:20])
    # every declaration has several problems: the count is of the problems left out
    assert lines[20].startswith("a3fast: … and ") and lines[20].endswith(" more problems")
    total = 20 + int(lines[20].split("and ")[1].split(" more")[0].replace(",", ""))
    assert total >= 60

"""Arbitrary input to every CLI command: the exit code is always one of the documented answers
{0, 1, 2} — never 3, the internal error — and no traceback is ever printed.

Each input slot of each command (a fleet, a requirements document, a trace, a card, a listing, a
manifest, an authority document, a vectors file) gets hostile files (deep nesting, huge integers,
lone surrogate escapes, invalid UTF-8, empty, missing, a directory), random JSON, random bytes, and
valid documents with a wrong-typed value at every path. Commands run in process through click's
CliRunner, and hypothesis keeps the number of examples small, so the whole file runs in seconds.
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a3fast import Fleet
from a3fast.cli import main
from a3fast.record.write import placement_records
from a3fast.workload import generate_fleet

REPO = Path(__file__).resolve().parents[2]
AUTHORITY = REPO / "examples" / "authority"
ANSWERS = {0, 1, 2}
FUZZ = settings(max_examples=12, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# -- valid documents, one per input slot ------------------------------------------------------------
DECLARATIONS = generate_fleet(4, 7)
REQUIREMENTS = {"v": "1.0", "capabilities": [DECLARATIONS[0]["capabilities"][0]],
                "clearances": DECLARATIONS[0]["clearances"][:1], "exclude": ["agent-000003"]}


def _trace(requirements: dict) -> list[dict]:
    fleet = Fleet()
    fleet.extend(DECLARATIONS)
    return [{"seq": seq, "kind": kind, "content": orjson.loads(content)}
            for seq, (kind, content) in enumerate(placement_records(fleet.place(requirements)), 1)]


BOUND_TRACE = _trace(REQUIREMENTS)
REJECTED_TRACE = _trace({"v": "1.0", "clearances": ["no.such"]})
CARD = {"name": "order-analyst", "url": "https://o.example/", "version": "7",
        "skills": [{"id": "order.investigate", "name": "Investigate"}]}
LISTING = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [
    {"name": "orders_lookup", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}]}}
MANIFEST = {"apiVersion": "v1", "kind": "Service", "metadata": {
    "name": "triage", "namespace": "ops", "annotations": {"a3.dev/declaration": json.dumps(DECLARATIONS[1])}}}
AUTHORITY_SLOTS = ("contracts", "mappings", "skills", "connection", "engagement", "policy")
AUTHORITY_DOCS = {slot: json.loads((AUTHORITY / f"{slot}.json").read_text()) for slot in AUTHORITY_SLOTS}
VECTORS = json.loads((REPO / "vectors" / "capability-schema" / "structure.json").read_text())[:2]


@dataclass(frozen=True)
class Slot:
    """One input of one command: the arguments with `path` in that place, and a valid document."""

    name: str
    args: Callable[[str, Path], list[str]]
    valid: Any
    jsonl: bool = False  # the valid document is written as JSON Lines (a list of documents)


def _valid_files(tmp: Path) -> dict[str, str]:
    """The other inputs of each command, valid, so that only the slot under test is hostile."""
    files = {"fleet": tmp / "fleet.jsonl", "req": tmp / "req.json", "trace": tmp / "trace.jsonl",
             "card": tmp / "card.json", "listing": tmp / "listing.json"}
    files["fleet"].write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in DECLARATIONS))
    files["req"].write_bytes(orjson.dumps(REQUIREMENTS))
    files["trace"].write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in BOUND_TRACE))
    files["card"].write_bytes(orjson.dumps(CARD))
    files["listing"].write_bytes(orjson.dumps(LISTING))
    for slot, doc in AUTHORITY_DOCS.items():
        files[slot] = tmp / f"{slot}.json"
        files[slot].write_bytes(orjson.dumps(doc))
    return {k: str(v) for k, v in files.items()}


def _resolve(slot: str) -> Callable[[str, Path], list[str]]:
    def args(path: str, tmp: Path) -> list[str]:
        valid = _valid_files(tmp)
        out = ["resolve", "--now", "2026-03-01T12:30:00Z", "-o", str(tmp / "resolved.txt")]
        for name in AUTHORITY_SLOTS:
            out += [f"--{name}", path if name == slot else valid[name]]
        return out
    return args


def _vectors(path: str, tmp: Path) -> list[str]:
    """`conformance --vectors DIR` where DIR's only vector file is the hostile one."""
    suite = tmp / "vectors" / "capability-schema"
    suite.mkdir(parents=True)
    target = suite / "fuzzed.json"
    source = Path(path)
    if source.is_dir():
        target.mkdir()
    elif source.exists():
        target.write_bytes(source.read_bytes())
    return ["conformance", "--vectors", str(tmp / "vectors")]


SLOTS = [
    Slot("place --fleet", lambda p, t: ["place", "--fleet", p, "--requirements", _valid_files(t)["req"],
                                        "-o", str(t / "o.jsonl")], DECLARATIONS, jsonl=True),
    Slot("place --requirements", lambda p, t: ["place", "--fleet", _valid_files(t)["fleet"],
                                               "--requirements", p, "-o", str(t / "o.jsonl")], REQUIREMENTS),
    Slot("verify", lambda p, t: ["verify", p], BOUND_TRACE, jsonl=True),
    Slot("verify --json", lambda p, t: ["verify", "--json", p], REJECTED_TRACE, jsonl=True),
    Slot("explain", lambda p, t: ["explain", p], BOUND_TRACE, jsonl=True),
    Slot("explain --seq --json", lambda p, t: ["explain", p, "--seq", "2", "--json"], REJECTED_TRACE, jsonl=True),
    Slot("explain --all-failed --fleet", lambda p, t: ["explain", _valid_files(t)["trace"], "--seq", "3",
                                                       "--all-failed", "--fleet", p], DECLARATIONS, jsonl=True),
    Slot("encode", lambda p, t: ["encode", p, "-o", str(t / "o.jsonl")], BOUND_TRACE, jsonl=True),
    Slot("decode", lambda p, t: ["decode", p, "-o", str(t / "o.jsonl")], REJECTED_TRACE, jsonl=True),
    Slot("replay", lambda p, t: ["replay", p, "--fleet", _valid_files(t)["fleet"], "-o", str(t / "o.jsonl")],
         BOUND_TRACE, jsonl=True),
    Slot("replay --fleet", lambda p, t: ["replay", _valid_files(t)["trace"], "--fleet", p, "--json"], DECLARATIONS, jsonl=True),
    Slot("gen-tasks --fleet", lambda p, t: ["gen-tasks", "--fleet", p, "--tasks", "3"], DECLARATIONS, jsonl=True),
    Slot("conformance --vectors", _vectors, VECTORS),
    *(Slot(f"resolve --{s}", _resolve(s), AUTHORITY_DOCS[s]) for s in AUTHORITY_SLOTS),
    Slot("import a2a", lambda p, t: ["import", "a2a", p, "--namespace", "n", "--capability-version", "1",
                                     "-o", str(t / "o.jsonl"), "--report", str(t / "r.json")], CARD),
    Slot("import a2a --grants", lambda p, t: ["import", "a2a", _valid_files(t)["card"], "--namespace", "n",
                                              "--grants", p, "--json"], {"order-analyst": ["orders.read"]}),
    Slot("import mcp", lambda p, t: ["import", "mcp", p, "--bind", "a", "--namespace", "n", "--server", "s",
                                     "--contracts", str(t / "c.jsonl"), "--mappings", str(t / "m.jsonl")],
         LISTING),
    Slot("import mcp --fleet", lambda p, t: ["import", "mcp", _valid_files(t)["listing"], "--fleet", p,
                                             "--bind-all", "-o", str(t / "o.jsonl")], DECLARATIONS, jsonl=True),
    Slot("import k8s", lambda p, t: ["import", "k8s", p, "--json"], MANIFEST),
]
SLOT_IDS = [s.name for s in SLOTS]


def invoke(args: list[str]):
    """Run one command in process; an exception escaping the CLI fails the test with its traceback."""
    return CliRunner().invoke(main, args, input=b"", catch_exceptions=False)


def assert_answered(slot: Slot, content: bytes | None, kind: str = "file"):
    """Run `slot` with `content` in its place (None: the path does not exist; kind 'dir': a
    directory) and require a documented exit code and no traceback."""
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        path = tmp / "input.json"
        if kind == "dir":
            path.mkdir()
        elif content is not None:
            path.write_bytes(content)
        result = invoke(slot.args(str(path), tmp))
    assert result.exit_code in ANSWERS, (slot.name, content[:200] if content else kind, result.output[-2000:])
    assert "Traceback" not in result.output


def encode(slot: Slot, doc: Any) -> bytes:
    """A document as its slot's file: JSON Lines for a list of documents, else JSON. Lone
    surrogates and integers beyond 64 bits are written as JSON allows (escapes, digits)."""
    if slot.jsonl and isinstance(doc, list):
        return b"".join(json.dumps(d).encode() + b"\n" for d in doc)
    return json.dumps(doc).encode()


# -- hostile files ------------------------------------------------------------------------------------
HOSTILE = {
    "empty": b"",
    "blank lines": b"\n\n  \n",
    "invalid UTF-8": b"\xff\xfe{\"v\": \"1.0\"}",
    "invalid UTF-8 in a string": b'{"v": "\xc3\x28"}',
    "a byte order mark": b"\xef\xbb\xbf{}",
    "NUL bytes": b"\x00" * 64,
    "truncated": b'{"v": "1.0", "capabilities": [',
    "NaN": b"NaN",
    "Infinity in a document": b'{"v": 1e999}',
    "a lone surrogate": b'"\\ud800"',
    "a lone surrogate in a name": b'{"v": "1.0", "agent": {"name": "\\udc00", "namespace": "n"}, '
                                  b'"capabilities": [], "clearances": []}',
    "a huge integer": b"1" * 5000,
    "a huge integer in a version": b'{"v": "1.0", "agent": {"name": "a", "namespace": "n"}, '
                                   b'"capabilities": [{"name": "a.b", "version": ' + b"9" * 400 + b'}], "clearances": []}',
    "a 65-bit integer": b'[{"seq": 18446744073709551616, "kind": "task.submitted", "content": {}}]',
    "a 65-bit integer in content": b'[{"seq": 1, "kind": "task.submitted", "content": {"x": -18446744073709551617}}]',
    "deep arrays": b"[" * 100_000 + b"]" * 100_000,
    "deep objects": b'{"a":' * 20_000 + b"1" + b"}" * 20_000,
    "unclosed deep arrays": b"[" * 100_000,
    "a long string": b'"' + b"x" * 1_000_000 + b'"',
    "many keys": b"{" + b",".join(b'"k%d": %d' % (i, i) for i in range(20_000)) + b"}",
}

def _hostile_params():
    for slot in SLOTS:
        for case, content in HOSTILE.items():
            yield pytest.param(slot, content, id=f"{slot.name}: {case}")


@pytest.mark.parametrize("slot, content", list(_hostile_params()))
def test_hostile_files_get_an_answer_not_a_crash(slot, content):
    assert_answered(slot, content)


@pytest.mark.parametrize("slot", SLOTS, ids=SLOT_IDS)
@pytest.mark.parametrize("kind", ["missing", "dir"])
def test_missing_files_and_directories_are_bad_input(slot, kind):
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        path = tmp / "input.json"
        if kind == "dir":
            path.mkdir()
        result = invoke(slot.args(str(path), tmp))
    assert result.exit_code in ANSWERS and "Traceback" not in result.output
    if slot.name != "conformance --vectors" and not slot.name.startswith("import"):
        assert result.exit_code == 2  # an importer skips an unreadable source and says so


# -- every path of a valid document, wrong-typed --------------------------------------------------------
def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += paths(value, prefix + (key,))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += paths(value, prefix + (i,))
    return out


def replaced(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    copy = dict(doc) if isinstance(doc, dict) else list(doc)
    copy[path[0]] = replaced(doc[path[0]], path[1:], value)
    return copy


#: Integers stay within 64 bits here and in the random values below: larger ones are the
#: hostile cases above.
WRONG = [None, True, 0, -1, 2**63, 1.5, "", "x", "\ud800", [], [None], {}, {"": None}]


def _wrong_for(value: Any, i: int) -> Any:
    """A value of another JSON type than `value`, varied by position so every type is used."""
    candidates = [w for w in WRONG if type(w) is not type(value)]
    return candidates[i % len(candidates)]


@pytest.mark.parametrize("slot", SLOTS, ids=SLOT_IDS)
def test_a_wrong_type_at_every_path_of_a_valid_document_is_answered(slot):
    # the trace slots' documents are large; every path of the first records is enough to reach
    # every field of every record kind
    doc = slot.valid
    for i, path in enumerate(paths(doc)):
        assert_answered(slot, encode(slot, replaced(doc, path, _wrong_for(_at(doc, path), i))))


def _at(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


# -- random JSON and random bytes ---------------------------------------------------------------------
scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
           | st.sampled_from(["\ud800", "\udfff", "1.0", "a.b", "agent-000001", "task.bound", "eu"]))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8) | st.sampled_from(
                               ["v", "agent", "name", "capabilities", "clearances", "seq", "kind", "content",
                                "requirements", "scheduling", "tools", "skills", "id"]), inner, max_size=4),
                           max_leaves=20)


@pytest.mark.parametrize("slot", SLOTS, ids=SLOT_IDS)
@FUZZ
@given(value=json_values)
def test_random_json_is_answered(slot, value):
    assert_answered(slot, json.dumps(value).encode())


@pytest.mark.parametrize("slot", SLOTS, ids=SLOT_IDS)
@FUZZ
@given(data=st.data())
def test_a_random_value_at_a_random_path_of_a_valid_document_is_answered(slot, data):
    doc = slot.valid
    all_paths = paths(doc)
    path = all_paths[data.draw(st.integers(0, len(all_paths) - 1), label="path")]
    assert_answered(slot, encode(slot, replaced(doc, path, data.draw(json_values, label="value"))))


@pytest.mark.parametrize("slot", SLOTS, ids=SLOT_IDS)
@FUZZ
@given(content=st.binary(max_size=300))
def test_random_bytes_are_answered(slot, content):
    assert_answered(slot, content)


# -- commands whose inputs are arguments --------------------------------------------------------------
numbers = st.one_of(st.integers(-5, 40).map(str), st.integers().map(str), st.text(max_size=6),
                    st.sampled_from(["nan", "inf", "-0", "1e3", "0x10", " 3", "٣"]))


@FUZZ
@given(agents=numbers, seed=numbers)
def test_gen_fleet_arguments_are_answered(agents, seed):
    with tempfile.TemporaryDirectory() as tmp:
        result = invoke(["gen-fleet", "--agents", agents, "--seed", seed, "-o", f"{tmp}/f.jsonl"])
    assert result.exit_code in ANSWERS and "Traceback" not in result.output


@FUZZ
@given(agents=st.integers(-2, 30).map(str) | numbers, tasks=st.integers(-2, 5).map(str), seed=numbers)
def test_demo_arguments_are_answered(agents, tasks, seed):
    with tempfile.TemporaryDirectory() as tmp:
        result = invoke(["demo", "--agents", agents, "--tasks", tasks, "--seed", seed, "-o", f"{tmp}/d.jsonl"])
    assert result.exit_code in ANSWERS and "Traceback" not in result.output


#: Verifier commands made of what breaks a command line (quotes, escapes, blanks) around a program
#: that exits at once: arbitrary text could name a program that runs until the timeout.
verifiers = (st.text(alphabet=" \t\"'\\", max_size=6)
             | st.tuples(st.text(alphabet=" \"'\\", max_size=3), st.text(alphabet=" \"'\\x", max_size=4))
             .map(lambda parts: parts[0] + "true" + parts[1]))


@FUZZ
@given(verifier=verifiers, timeout=numbers)
def test_conformance_verifier_and_timeout_are_answered(verifier, timeout):
    with tempfile.TemporaryDirectory() as tmp:
        suite = Path(tmp) / "capability-schema"
        suite.mkdir()
        (suite / "v.json").write_text(json.dumps(VECTORS[:1]))
        result = invoke(["conformance", "--vectors", tmp, "--verifier", verifier, "--timeout", timeout])
    assert result.exit_code in ANSWERS and "Traceback" not in result.output


@FUZZ
@given(now=st.text(max_size=30) | st.sampled_from(["2026-03-01T12:30:00Z", "9999-12-31T23:59:59-23:59",
                                                       "0001-01-01T00:00:00+23:59"]),
       skew=numbers, key=st.text(max_size=12))
def test_resolve_arguments_are_answered(now, skew, key):
    with tempfile.TemporaryDirectory() as tmp:
        valid = _valid_files(Path(tmp))
        args = ["resolve", "--now", now, "--skew", skew, "--key", key]
        for name in AUTHORITY_SLOTS:
            args += [f"--{name}", valid[name]]
        result = invoke(args)
    assert result.exit_code in ANSWERS and "Traceback" not in result.output

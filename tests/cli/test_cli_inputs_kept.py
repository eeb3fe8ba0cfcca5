"""An output never replaces an input, a pipe or FIFO is read as one or refused by name (never
waited on for ever or misread), and every refusal is one line that says where and what."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from a3fast.cli import main

REPO = Path(__file__).resolve().parents[2]
AUTHORITY = REPO / "examples" / "authority"
QUICKSTART = REPO / "examples" / "quickstart"
CARD = {"name": "order-analyst", "url": "https://o.example/", "skills": [{"id": "order.investigate"}]}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def refused(result, *fragments):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    return result.stderr


@pytest.mark.parametrize("option", ["contracts", "mappings", "skills", "connection", "engagement", "policy"])
def test_rule_resolve_never_replaces_one_of_its_inputs(tmp_path, option):
    for path in AUTHORITY.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    target = tmp_path / f"{option}.json"
    before = target.read_bytes()
    args = [a for name in ("contracts", "mappings", "skills", "connection", "engagement", "policy")
            for a in (f"--{name}", tmp_path / f"{name}.json")]
    refused(run("resolve", *args, "--now", "2026-02-01T00:00:00Z", "-o", tmp_path / ".." / tmp_path.name / target.name),
            f"must not replace the file of --{option}")
    assert target.read_bytes() == before


def test_rule_import_never_replaces_a_file_it_reads_from_a_directory(tmp_path):
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "card.json").write_bytes(orjson.dumps(CARD))
    for option in ("-o", "--report"):
        refused(run("import", "a2a", cards, "--namespace", "x", option, cards / "card.json"),
                "must not replace a file of", "A2A agent cards")
        assert orjson.loads((cards / "card.json").read_bytes()) == CARD
    # declarations written among the cards are of another kind: the read skips them, so a second
    # run may write them again
    for _ in range(2):
        done = run("import", "a2a", cards, "--namespace", "x", "-o", cards / "fleet.jsonl")
        assert done.exit_code == 0, done.output
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    shutil.copy(REPO / "examples" / "interop" / "agents.yaml", manifests / "agents.yaml")
    before = (manifests / "agents.yaml").read_bytes()
    refused(run("import", "k8s", manifests, "-o", manifests / "agents.yaml"), "must not replace a file of")
    assert (manifests / "agents.yaml").read_bytes() == before


def test_rule_encode_never_replaces_its_trace_and_names_a_byte_that_is_no_utf8(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(subprocess.run([sys.executable, "-m", "a3fast", "place", "--fleet", QUICKSTART / "fleet.jsonl",
                                      "--requirements", QUICKSTART / "req.json"], capture_output=True).stdout)
    before = trace.read_bytes()
    refused(run("encode", trace, "-o", trace), "must not replace")
    assert trace.read_bytes() == before
    lines = before.split(b"\n")
    at = lines[1].index(b'"', 20) + 1
    lines[1] = lines[1][:at] + b"\xc3" + lines[1][at:]
    (tmp_path / "bad.jsonl").write_bytes(b"\n".join(lines))
    message = refused(run("encode", tmp_path / "bad.jsonl"))
    assert f"line 2: not JSON: text that is not UTF-8: the byte 0xc3 at column {at + 1} (byte {at})" in message


def _through_a_pipe(*args: str, data: bytes) -> subprocess.CompletedProcess:
    """`a3fast ARGS` with `{}` in ARGS replaced by a pipe holding `data` (as `<(...)` gives one)."""
    read, write = os.pipe()
    os.set_inheritable(read, True)
    writer = subprocess.Popen([sys.executable, "-c", "import os, sys; os.write(1, sys.stdin.buffer.read())"],
                              stdin=subprocess.PIPE, stdout=write)
    os.close(write)
    argv = [a.replace("{}", f"/dev/fd/{read}") for a in args]
    done = subprocess.Popen([sys.executable, "-m", "a3fast", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            pass_fds=(read,))
    os.close(read)
    writer.communicate(data, timeout=60)
    out, err = done.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, done.returncode, out, err)


def test_rule_replay_reads_a_fleet_through_a_pipe_and_refuses_a_snapshot_there(tmp_path):
    from a3fast import Fleet

    trace = tmp_path / "t.jsonl"
    trace.write_bytes(subprocess.run([sys.executable, "-m", "a3fast", "place", "--fleet", QUICKSTART / "fleet.jsonl",
                                      "--requirements", QUICKSTART / "req.json"], capture_output=True).stdout)
    fleet = (QUICKSTART / "fleet.jsonl").read_bytes()
    piped = _through_a_pipe("replay", str(trace), "--fleet", "{}", "--json", data=fleet)
    assert piped.returncode == 0, piped.stderr
    summary = json.loads(piped.stdout)["summary"]
    assert summary["placements"] == 1 and summary["kinds"]["same"] == 1
    snapshot = Fleet()
    snapshot.extend(orjson.loads(line) for line in fleet.splitlines() if line.strip())
    snapshot.save(tmp_path / "fleet.a3snap")
    piped = _through_a_pipe("replay", str(trace), "--fleet", "{}", data=(tmp_path / "fleet.a3snap").read_bytes())
    assert piped.returncode == 2 and b"a fleet snapshot is read from a file, not a pipe" in piped.stderr


def test_rule_conformance_names_vector_entries_that_are_no_regular_file_and_never_waits_on_one(tmp_path):
    vectors = tmp_path / "vectors"
    shutil.copytree(REPO / "vectors", vectors)
    os.mkfifo(vectors / "capability-schema" / "x.json")
    (vectors / "capability-schema" / "d.json").mkdir()
    done = subprocess.run([sys.executable, "-m", "a3fast", "conformance", "--vectors", str(vectors)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "x.json: not a regular file" in done.stderr and "d.json: not a regular file" in done.stderr


def test_rule_a_long_value_a_vector_schema_refuses_is_named_short_with_the_rule(tmp_path):
    from a3fast.conformance import check_vector_files

    vectors = tmp_path / "vectors"
    shutil.copytree(REPO / "vectors", vectors)
    (vectors / "capability-schema" / "long.json").write_text(json.dumps(
        [{"description": "x", "trace": [], "expected": {"valid": "a" * 5000, "errors": []}}]))
    [problem, *_] = check_vector_files(vectors)
    assert problem.startswith("long.json: $[0].expected.valid: string 'aaa")
    assert problem.endswith("…' fails the schema's 'type' rule") and len(problem) < 200


def test_rule_a_file_name_with_a_newline_is_named_on_one_line(tmp_path):
    name = tmp_path / "gar\nbage.jsonl"
    name.write_bytes(b"garbage\n")
    for args in (["place", "--fleet", name, "--requirements", QUICKSTART / "req.json"],
                 ["place", "--fleet", QUICKSTART / "fleet.jsonl", "--requirements", name]):
        message = refused(run(*args))
        assert message.count("\n") == 1 and "gar\\nbage.jsonl: " in message


@pytest.mark.parametrize("yaml_text, found", [
    ("apiVersion: v1\nkind: X\nspec: {n: " + "9" * 5000 + "}\n",
     "expected values YAML can read, found an integer of more than 4,300 digits"),
    ('a: "\\ud800"\n', "expected valid YAML, found invalid Unicode character escape code"),
])
def test_rule_yaml_a_manifest_reader_refuses_is_named_in_its_own_words(tmp_path, yaml_text, found):
    (tmp_path / "m.yaml").write_text(yaml_text)
    done = run("import", "k8s", tmp_path / "m.yaml")
    assert done.exit_code == 2 and found in done.stderr and "set_int_max_str_digits" not in done.stderr

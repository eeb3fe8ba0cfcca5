"""`a3fast resolve`: per-skill answers, the --json form, exit codes 0 / 1 / 2, on the worked example."""
from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from hypothesis import assume, given, settings, strategies as st

from a3fast.authority import generate_private_key, public_key_text, sign_engagement
from a3fast.cli import main
from a3fast.kinds import sniff

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "authority"
NOW = "2026-03-01T12:30:00Z"


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def example_args(**replace):
    files = {name: str(EXAMPLES / f"{name}.json")
             for name in ("contracts", "mappings", "skills", "connection", "engagement", "policy")}
    files.update({k: str(v) for k, v in replace.items()})
    return [arg for name, path in files.items() for arg in (f"--{name}", path)]


def write(tmp_path, name, doc) -> Path:
    path = tmp_path / name
    path.write_bytes(doc if isinstance(doc, bytes) else orjson.dumps(doc))
    return path


def example(name):
    return json.loads((EXAMPLES / f"{name}.json").read_text())


def test_required_skills_that_resolve_exit_0():
    result = run("resolve", *example_args(), "--now", NOW, "--require", "chess.play", "--require", "chess.resign")
    assert result.exit_code == 0
    assert "skill chess.play: available (required)" in result.stdout


def test_without_require_every_skill_is_required_and_an_unavailable_one_exits_1():
    result = run("resolve", *example_args(), "--now", NOW)
    assert result.exit_code == 1
    assert "skill chess.wager: unavailable (required)" in result.stdout


def test_each_unmet_requirement_is_printed_with_its_reason():
    out = run("resolve", *example_args(), "--now", NOW).stdout
    assert "  game.wager.place/2: denied by runtime policy rule no-money" in out
    assert "  engine.position.evaluate/1: no host mapping: no tool on this host satisfies it" in out
    assert "  game.spectators.invite/1: not granted by the connection" in out
    assert "  optional game.chat.send/1: not granted by the engagement" in out


def test_the_json_form_carries_boundaries_authority_and_skills():
    result = run("resolve", *example_args(), "--now", NOW, "--require", "chess.play", "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 0 and doc["ok"] is True and doc["engagement"]["valid"] is True
    skills = {s["skill"]: s for s in doc["skills"]}
    assert skills["chess.play"]["required_by_caller"] and not skills["chess.wager"]["required_by_caller"]
    assert skills["chess.play"]["bindings"][1]["confirmation"][0]["rule"] == "confirm-shared-moves"
    assert {g["capability"]: g["status"] for g in doc["authority"]}["game.wager.place/2"] == "denied"


def test_an_expired_engagement_grants_nothing_and_exits_1():
    result = run("resolve", *example_args(), "--now", "2026-03-01T14:00:00Z", "--require", "chess.play")
    assert result.exit_code == 1
    assert "engagement: rejected, grants nothing: expired at 2026-03-01T14:00:00Z" in result.stdout


def test_a_tampered_engagement_grants_nothing_and_exits_1(tmp_path):
    tampered = {**example("engagement"), "context": "casual-match-1"}
    result = run("resolve", *example_args(engagement=write(tmp_path, "e.json", tampered)), "--now", NOW)
    assert result.exit_code == 1 and "signature does not verify" in result.stdout


def test_a_malformed_engagement_is_an_answer_not_bad_input(tmp_path):
    result = run("resolve", *example_args(engagement=write(tmp_path, "e.json", {"capabilities": 1})), "--now", NOW)
    assert result.exit_code == 1 and "malformed descriptor" in result.stdout


def test_a_revoked_connection_exits_1(tmp_path):
    revoked = {**example("connection"), "revoked_at": "2026-03-01T12:15:00Z"}
    result = run("resolve", *example_args(connection=write(tmp_path, "c.json", revoked)), "--now", NOW,
                 "--require", "chess.play")
    assert result.exit_code == 1
    assert "connection conn-7f3a with arena.example: revoked at 2026-03-01T12:15:00Z" in result.stdout


@pytest.mark.parametrize("twice", [("contracts", "mappings"), ("connection", "engagement")])
def test_standard_input_named_for_two_documents_is_bad_input(twice):
    args = example_args(**{name: "-" for name in twice})
    result = run("resolve", *args, "--now", NOW)
    assert result.exit_code == 2
    assert result.stderr == (f"a3fast: standard input is read once: --{twice[0]} and --{twice[1]} each ask for "
                             f"it; give all but one as a file\n")


def test_an_engagement_that_is_not_json_is_bad_input(tmp_path):
    result = run("resolve", *example_args(engagement=write(tmp_path, "e.json", b"{\"a\":")), "--now", NOW)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith(f"a3fast: {tmp_path / 'e.json'}: $: expected valid JSON")


def test_bad_documents_are_bad_input_one_line_per_problem(tmp_path):
    contracts = [{"id": "game.move.submit", "operation": "run", "resource": "m", "confirmation": "never"}, 7]
    result = run("resolve", *example_args(contracts=write(tmp_path, "c.json", contracts)), "--now", NOW)
    path = tmp_path / "c.json"
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"a3fast: {path}: $[0].operation: expected one of read, reveal, create, modify, delete, execute, "
        "transact, communicate, delegate, administer, found string 'run'",
        f"a3fast: {path}: $[1]: expected an object, found 7"]


def test_skills_may_be_json_lines_with_problems_named_by_line(tmp_path):
    lines = b'{"id": "chess.play", "required": ["game.board.read"]}\n{"id": "x", "required": []}\n'
    result = run("resolve", *example_args(skills=write(tmp_path, "s.jsonl", lines)), "--now", NOW)
    assert result.exit_code == 2
    assert "line 2: $.id: expected a skill identifier" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--require", "chess.fly"], "--require chess.fly: no skill with this id in"),
    (["--now", "noon"], "--now: expected an RFC 3339 date-time with an offset, found 'noon'"),
    (["--key", "nofile"], "--key 'nofile': expected KID=FILE"),
])
def test_bad_flags_are_bad_input(args, message):
    result = run("resolve", *example_args(), "--now", NOW, *args)
    assert result.exit_code == 2 and message in result.stderr


def test_a_signing_key_can_be_trusted_from_a_pem_file(tmp_path):
    key = generate_private_key()
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    engagement = sign_engagement({k: v for k, v in example("engagement").items() if k != "signature"}, key, "ops-2026")
    args = example_args(engagement=write(tmp_path, "e.json", engagement))
    assert run("resolve", *args, "--now", NOW, "--require", "chess.play").exit_code == 1  # not trusted yet
    trusted = run("resolve", *args, "--now", NOW, "--require", "chess.play",
                  "--key", f"ops-2026={write(tmp_path, 'ops.pem', pem)}")
    assert trusted.exit_code == 0, trusted.stdout


def test_a_key_file_that_holds_no_ed25519_key_is_bad_input(tmp_path):
    result = run("resolve", *example_args(), "--now", NOW, "--key", f"k={write(tmp_path, 'k.pem', b'junk')}")
    assert result.exit_code == 2 and "--key k:" in result.stderr


def test_a_key_id_or_a_key_file_holding_an_equals_sign_is_cut_where_a_file_follows(tmp_path):
    key = generate_private_key()
    engagement = sign_engagement({k: v for k, v in example("engagement").items() if k != "signature"}, key, "k9=x")
    args = example_args(engagement=write(tmp_path, "e.json", engagement))
    path = write(tmp_path, "k.txt", public_key_text(key).encode())
    trusted = run("resolve", *args, "--now", NOW, "--require", "chess.play", "--key", f"k9=x={path}")
    assert trusted.exit_code == 0, trusted.stderr
    # "k=T/a=T/b": the key file T/a=T/b under "k", or T/b under "k=T/a": both files, so neither
    both = Path(f"{tmp_path}/a={tmp_path}/b")
    both.parent.mkdir(parents=True)
    both.write_text(public_key_text(key))
    (tmp_path / "b").write_text(public_key_text(key))
    ambiguous = run("resolve", *args, "--now", NOW, "--key", f"k={tmp_path}/a={tmp_path}/b")
    assert ambiguous.exit_code == 2 and "ambiguous: both" in ambiguous.stderr


def test_a_key_id_the_connection_already_trusts_cannot_be_replaced(tmp_path):
    path = write(tmp_path, "k.txt", public_key_text(generate_private_key()).encode())
    result = run("resolve", *example_args(), "--now", NOW, "--key", f"arena-2026-03={path}")
    assert result.exit_code == 2 and "already trusts" in result.stderr


def test_output_goes_to_a_file_when_asked(tmp_path):
    out = tmp_path / "result.json"
    result = run("resolve", *example_args(), "--now", NOW, "--json", "-o", str(out), "--require", "chess.play")
    assert result.exit_code == 0 and result.stdout == "" and json.loads(out.read_text())["ok"] is True


def documented_runs(text):
    """(argv, output, exit status) of each ```console block: `$ ` command lines (continued by a
    trailing backslash), then the output, then `(exit status N)`."""
    for block in re.findall(r"```console\n(.+?)```", text, re.S):
        lines = block.rstrip("\n").split("\n")
        command = [lines.pop(0)[2:]]
        while command[-1].endswith("\\"):
            command[-1] = command[-1][:-1]
            command.append(lines.pop(0))
        status = int(re.fullmatch(r"\(exit status (\d)\)", lines.pop()).group(1))
        yield " ".join(command).split()[1:], "\n".join(lines), status


def test_the_documented_worked_example_is_the_real_output():
    runs = list(documented_runs((ROOT / "docs" / "authority.md").read_text()))
    assert runs, "docs/authority.md shows the worked example"
    for argv, shown, status in runs:
        result = run(*[str(ROOT / a) if a.startswith("examples/") else a for a in argv])
        assert (result.stdout.rstrip("\n"), result.exit_code) == (shown, status)


json_values = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=12),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=3),
                           max_leaves=10)


@settings(max_examples=60)
@given(st.one_of(json_values, st.builds(lambda d: {**example("engagement"), **d},
                                        st.dictionaries(st.sampled_from(["context", "capabilities", "expires",
                                                                         "signature", "connection"]), json_values,
                                                        min_size=1))))
def test_no_engagement_but_the_signed_one_lets_a_required_skill_resolve(descriptor):
    assume(descriptor != example("engagement"))
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), "e.json", json.dumps(descriptor).encode())
        result = run("resolve", *example_args(engagement=path), "--now", NOW, "--require", "chess.play")
    assert result.exit_code == 1 and "engagement: rejected, grants nothing: " in result.stdout


def _trusted_signing(tmp_path, extra_members):
    """The example engagement with `extra_members`, signed by a new key trusted with --key."""
    key = generate_private_key()
    unsigned = {**{k: v for k, v in example("engagement").items() if k != "signature"}, **extra_members}
    engagement = sign_engagement(unsigned, key, "ops-2026")
    key_path = write(tmp_path, "ops.txt", public_key_text(key).encode())
    return write(tmp_path, "e.json", engagement), ["--key", f"ops-2026={key_path}"]


def test_a_signed_engagement_with_members_of_its_own_is_read_whatever_it_looks_like(tmp_path):
    # members a descriptor carries beyond the note's are kept and ignored: one with a `v` and an
    # `agent` object reads like a declaration, but it is an engagement, and it resolves
    path, trust = _trusted_signing(tmp_path, {"v": "1.0", "agent": {"name": "x", "namespace": "y"}})
    result = run("resolve", *example_args(engagement=path), *trust, "--now", NOW, "--require", "chess.play")
    assert result.exit_code == 0, result.stdout + result.stderr
    # one that holds only capabilities is no descriptor, and reads like requirements: told so in one
    # line, as any file of another kind (a malformed descriptor of no kind a3fast writes is an answer)
    caps = write(tmp_path, "caps.json", {"capabilities": ["a.b"]})
    result = run("resolve", *example_args(engagement=caps), "--now", NOW, "--require", "chess.play")
    assert result.exit_code == 2 and result.stderr == (
        f"a3fast: {caps} looks like requirements, not an engagement (read as an engagement: $.experience: "
        f"expected the required field 'experience', found nothing)\n")
    malformed = write(tmp_path, "m.json", {"capabilities": "all"})
    result = run("resolve", *example_args(engagement=malformed), "--now", NOW, "--require", "chess.play")
    assert result.exit_code == 1 and "engagement: rejected, grants nothing: malformed descriptor" in result.stdout
    # and a connection with a `v` member is a connection
    connection = {**example("connection"), "v": "1.0", "agent": {"name": "x", "namespace": "y"}}
    result = run("resolve", *example_args(connection=write(tmp_path, "c.json", connection)), "--now", NOW,
                 "--require", "chess.play")
    assert result.exit_code == 0, result.stdout + result.stderr


@pytest.mark.parametrize("given, kind", [
    ({"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}], "clearances": ["orders.read"]},
     "requirements"),
    ([{"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": []}], "declarations"),
])
def test_requirements_or_declarations_given_as_the_policy_are_bad_input(tmp_path, given, kind):
    # any object parses as a policy (every member is optional): one that looks like requirements or
    # declarations and holds no `rules` or `default` would allow everything; it is told what it is
    path = write(tmp_path, "p.json", given)
    result = run("resolve", *example_args(policy=path), "--now", NOW, "--require", "chess.play")
    assert result.exit_code == 2 and result.stderr.startswith(f"a3fast: {path} looks like {kind}, not a policy (read as "
                                                              f"a policy: $: expected ")
    assert len(result.stderr.splitlines()) == 1
    assert result.stdout == ""


@pytest.mark.parametrize("given", [
    # requirements with a member of their own (§4 allows it), which no longer look like requirements
    {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}], "clearances": ["orders.read"],
     "note": "mine"},
    example("connection"),          # another authority document
])
def test_any_object_without_rules_or_default_given_as_the_policy_is_bad_input(tmp_path, given):
    path = write(tmp_path, "p.json", given)
    result = run("resolve", *example_args(policy=path), "--now", NOW, "--require", "chess.play")
    assert result.exit_code == 2 and result.stdout == ""
    assert "expected a runtime policy: `rules` or `default` ({} for one that allows everything)" in result.stderr
    assert str(path) in result.stderr


def test_an_empty_policy_allows_everything(tmp_path):
    result = run("resolve", *example_args(policy=write(tmp_path, "p.json", {})), "--now", NOW)
    assert result.exit_code == 1 and "denied by runtime policy" not in result.stdout


def test_a_policy_with_members_of_its_own_is_read_whatever_it_looks_like(tmp_path):
    # a policy that carries a `v` and an `agent` object of its own reads like a declaration, but it
    # has rules: it is a policy, and its deny applies
    policy = {**example("policy"), "v": "1.0", "agent": {"name": "x", "namespace": "y"}}
    assert sniff(str(write(tmp_path, "p.json", policy))).name == "declarations"
    result = run("resolve", *example_args(policy=write(tmp_path, "p.json", policy)), "--now", NOW)
    assert result.exit_code == 1
    assert "  game.wager.place/2: denied by runtime policy rule no-money" in result.stdout


def test_a_trace_given_as_an_engagement_is_still_bad_input(tmp_path):
    trace = b'{"seq":1,"kind":"task.submitted","content":{"requirements":{}}}\n'
    result = run("resolve", *example_args(engagement=write(tmp_path, "t.jsonl", trace)), "--now", NOW)
    assert result.exit_code == 2 and "looks like a trace" in result.stderr


def test_a_key_id_given_twice_is_bad_input(tmp_path):
    first = write(tmp_path, "k1.txt", public_key_text(generate_private_key()).encode())
    second = write(tmp_path, "k2.txt", public_key_text(generate_private_key()).encode())
    result = run("resolve", *example_args(), "--now", NOW, "--key", f"ops={first}", "--key", f"ops={second}")
    assert result.exit_code == 2 and "--key ops: given twice; one key per key id" in result.stderr


def test_the_operating_context_the_host_names_is_checked(tmp_path):
    context = example("engagement")["context"]
    here = run("resolve", *example_args(), "--now", NOW, "--context", context, "--require", "chess.play")
    assert here.exit_code == 0, here.stdout
    elsewhere = run("resolve", *example_args(), "--now", NOW, "--context", "casual-match-9", "--json")
    assert elsewhere.exit_code == 1
    reasons = orjson.loads(elsewhere.stdout)["engagement"]["reasons"]
    assert [r["code"] for r in reasons] == ["wrong_context"]


def test_a_key_on_standard_input_counts_among_the_documents_read_from_it():
    result = run("resolve", *example_args(engagement="-"), "--now", NOW, "--key", "k2=-")
    assert result.exit_code == 2
    assert result.stderr == ("a3fast: standard input is read once: --engagement and --key k2 each ask for it; "
                             "give all but one as a file\n")


def test_an_authority_document_that_looks_like_another_kind_is_read_as_asked_first(tmp_path):
    # a descriptor or policy may carry members of its own: one with `content` and `kind` reads like
    # a trace, yet it is what was asked for; a connection that looks like a declaration and does
    # not parse says what reading it as a connection found
    path, trust = _trusted_signing(tmp_path, {"kind": "engagement", "content": {"board": "start"}})
    assert sniff(path.read_bytes()).name == "trace"
    result = run("resolve", *example_args(engagement=path), *trust, "--now", NOW, "--require", "chess.play")
    assert result.exit_code == 0, result.stdout + result.stderr
    policy = write(tmp_path, "p.json", {**example("policy"), "kind": "runtime-policy", "content": "house rules"})
    result = run("resolve", *example_args(policy=policy), "--now", NOW, "--require", "chess.play")
    assert result.exit_code == 0, result.stdout + result.stderr
    connection = {**example("connection"), "v": "1.0", "revoked_at": "2026-03-01 12:00"}
    path = write(tmp_path, "c.json", connection)
    result = run("resolve", *example_args(connection=path), "--now", NOW)
    assert result.exit_code == 2
    assert result.stderr == (f"a3fast: {path} looks like declarations, not a connection (read as a connection: "
                             f"$.revoked_at: expected an RFC 3339 date-time with an offset, such as "
                             f"\"2026-03-01T12:00:00Z\", found string '2026-03-01 12:00')\n")


@pytest.mark.parametrize("document", ["engagement", "connection", "policy"])
def test_a_member_named_twice_in_an_authority_document_is_bad_input(tmp_path, document):
    # a reader keeping the first of two `connection` members would see another descriptor in the
    # same signed bytes; this reader keeps the last: neither reading is proof
    raw = (EXAMPLES / f"{document}.json").read_text()
    member = next(iter(example(document)))
    path = write(tmp_path, f"{document}.json", raw.replace("{", '{"%s": "elsewhere", ' % member, 1).encode())
    result = run("resolve", *example_args(**{document: path}), "--now", NOW)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (f"a3fast: {path}: member {member!r} appears twice in one object; "
                             f"{'an' if document == 'engagement' else 'a'} {document} must name each member once\n")
    # the same member once, in a nested object of its own, is not twice
    nested = write(tmp_path, "n.json", raw.replace("{", '{"notes": {"%s": 1}, ' % member, 1).encode())
    assert run("resolve", *example_args(**{document: nested}), "--now", NOW).exit_code in (0, 1)


@pytest.mark.parametrize("document", ["contracts", "mappings", "skills"])
@pytest.mark.parametrize("form", ["array", "lines"])
def test_a_member_named_twice_in_a_contract_mapping_or_skill_is_bad_input(tmp_path, document, form):
    # a contract's `data_classes` given twice, the last empty, escaped a policy denying its data
    # class: the same proof-less reading the descriptors are refused for
    docs = example(document)
    member = next(iter(docs[-1]))
    texts = [orjson.dumps(doc) for doc in docs]
    texts[-1] = texts[-1].replace(b"{", b'{"%s": "elsewhere", ' % member.encode(), 1)
    data = b"[" + b",".join(texts) + b"]" if form == "array" else b"\n".join(texts) + b"\n"
    path = write(tmp_path, f"{document}.json", data)
    result = run("resolve", *example_args(**{document: path}), "--now", NOW)
    assert result.exit_code == 2 and result.stdout == ""
    where = f"$[{len(docs) - 1}]" if form == "array" else f"line {len(docs)}: $"
    assert result.stderr == (f"a3fast: {path}: {where}: expected objects that name each member once, "
                             f"found member {member!r} twice in one object\n")

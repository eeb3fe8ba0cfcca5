"""The conformance vectors (§9): loading them, checking their format, and running them against a3fast
or against any other verifier given as a command.

A vector is `{description, comment?, trace, expected: {valid, errors: [{code, seq}]}}` in a file of
`vectors/capability-schema/` (modelled on the JSON-Schema-Test-Suite). `trace` is a list of records,
each written as one JSON Lines line, or a string that is the trace's text as is (for traces that
break the format). A verifier passes a vector when its `valid` agrees and the set of `(code, seq)`
of its errors equals the expected set; messages, lines and warnings are not compared.

An external verifier is a command that reads one trace on standard input and prints the result
form of `a3fast verify --json`: `{"valid": bool, "errors": [{"code", "seq", ...}], ...}`.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable

import orjson

from .errors import describe
from . import process_groups

__all__ = ["Vector", "Outcome", "MatchingCase", "MatchResult", "load_matching", "literal_match",
           "fleet_match", "CAPABILITY_SUITE", "MATCHING_SUITE", "default_vectors_dir",
           "load_vectors", "vector_files", "check_vector_files", "trace_bytes", "run_a3fast",
           "run_command", "run_vectors", "CommandNotStarted", "MAX_TIMEOUT_S", "MAX_DESCRIPTION"]

CAPABILITY_SUITE = "capability-schema"
MATCHING_SUITE = "matching"
#: Descriptions name what a vector shows, briefly (the JSON-Schema-Test-Suite's rule of thumb).
MAX_DESCRIPTION = 80


def default_vectors_dir() -> Path | None:
    """Where the vectors are: `$A3FAST_VECTORS`; else the `vectors/` installed with a3fast (the
    build copies the checkout's `vectors/` into the package); else the `vectors/` of the source tree
    a3fast runs from (an editable install); else `./vectors`. None when none of them holds any."""
    env = os.environ.get("A3FAST_VECTORS")
    if env:
        return Path(env)
    for candidate in (_installed_vectors(), Path(__file__).resolve().parents[2] / "vectors",
                      Path.cwd() / "vectors"):
        if candidate is not None and (candidate / CAPABILITY_SUITE).is_dir():
            return candidate
    return None


def _installed_vectors() -> Path | None:
    """The package's own `vectors/`, when the package lies in a directory (not in a zip file)."""
    found = resources.files(__package__) / "vectors"
    return found if isinstance(found, Path) else None


@dataclass(frozen=True)
class Vector:
    """One case. `id` is `<file>:<description>`, readable in test ids and failure lists."""

    file: str
    description: str
    trace: Any
    valid: bool
    errors: frozenset[tuple[str, int | None]]
    comment: str | None = None
    optional: bool = False

    @property
    def id(self) -> str:
        return f"{self.file}:{self.description}"


@dataclass
class Outcome:
    vector: Vector
    passed: bool
    valid: bool | None = None
    errors: frozenset[tuple[str, int | None]] = frozenset()
    problem: str | None = None  # why an external verifier's answer could not be read
    messages: list[str] = field(default_factory=list)

    @property
    def missing(self) -> list[tuple[str, int | None]]:
        return sorted(self.vector.errors - self.errors, key=_order)

    @property
    def unexpected(self) -> list[tuple[str, int | None]]:
        return sorted(self.errors - self.vector.errors, key=_order)

    def explain(self) -> str:
        """One line: what was expected and what the verifier said."""
        if self.problem:
            return self.problem
        parts = []
        if self.valid != self.vector.valid:
            parts.append(f"valid: expected {str(self.vector.valid).lower()}, got {str(self.valid).lower()}")
        if self.missing:
            parts.append("missing " + ", ".join(_pair(p) for p in self.missing))
        if self.unexpected:
            parts.append("unexpected " + ", ".join(_pair(p) for p in self.unexpected))
        return "; ".join(parts)


def _order(pair: tuple[str, int | None]) -> tuple[int, str]:
    return (pair[1] if pair[1] is not None else -1, pair[0])


def _pair(pair: tuple[str, int | None]) -> str:
    return f"{pair[0]}@{'null' if pair[1] is None else pair[1]}"


def vector_files(root: Path, suite: str = CAPABILITY_SUITE) -> list[Path]:
    """The suite's vector files (optional/ included), sorted; not the format's schema.json. Only
    regular files: a FIFO or a device named *.json is never opened (a FIFO would wait for a
    writer for ever); `check_vector_files` names each one it leaves out."""
    return [p for p in _json_entries(root, suite) if p.is_file()]


def _json_entries(root: Path, suite: str) -> list[Path]:
    base = Path(root) / suite
    return sorted(p for p in base.rglob("*.json") if p.name != "schema.json")


def load_vectors(root: Path, suite: str = CAPABILITY_SUITE, *, optional: bool = True) -> list[Vector]:
    """Every vector of a suite; malformed files raise ValueError (run `check_vector_files` first)."""
    base = Path(root) / suite
    out = []
    for path in vector_files(root, suite):
        rel = path.relative_to(base).as_posix()
        is_optional = rel.startswith("optional/")
        if is_optional and not optional:
            continue
        cases = orjson.loads(path.read_bytes())
        for case in cases:
            expected = case["expected"]
            out.append(Vector(
                file=rel, description=case["description"], trace=case["trace"],
                valid=expected["valid"],
                errors=frozenset((e["code"], e["seq"]) for e in expected["errors"]),
                comment=case.get("comment"), optional=is_optional))
    return out


def check_vector_files(root: Path, suite: str = CAPABILITY_SUITE) -> list[str]:
    """Problems with a suite's files: JSON that does not parse, cases the format's schema.json
    refuses, descriptions that repeat within a file or are longer than MAX_DESCRIPTION."""
    import jsonschema

    base = Path(root) / suite
    problems: list[str] = []
    try:
        schema = orjson.loads((base / "schema.json").read_bytes())
        validator = jsonschema.Draft202012Validator(schema)
        jsonschema.Draft202012Validator.check_schema(schema)
    except OSError as exc:             # named under the suite's directory, as the vector files are
        return [f"schema.json: cannot read: {exc.strerror or exc}"]
    except (orjson.JSONDecodeError, jsonschema.SchemaError) as exc:
        return [f"schema.json: {exc}"]
    for path in _json_entries(root, suite):
        rel = path.relative_to(base).as_posix()
        if not path.is_file():
            problems.append(f"{rel}: not a regular file (a directory, FIFO, device or broken link): not read")
            continue
        try:
            cases = orjson.loads(path.read_bytes())
        except OSError as exc:
            problems.append(f"{rel}: cannot read: {exc.strerror or exc}")
            continue
        except orjson.JSONDecodeError as exc:
            problems.append(f"{rel}: not JSON: {exc}")
            continue
        for error in validator.iter_errors(cases):
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            # jsonschema's message quotes the value whole first: a long one would be cut before it
            # says what is wrong
            message = error.message if len(error.message) <= 200 else \
                f"{describe(error.instance)} fails the schema's {error.validator!r} rule"
            problems.append(f"{rel}: ${where}: {message}")
        if not isinstance(cases, list):
            continue
        seen: set[str] = set()
        for i, case in enumerate(cases):
            description = case.get("description") if isinstance(case, dict) else None
            if not isinstance(description, str):
                continue
            if description in seen:
                problems.append(f"{rel}: [{i}] description repeats: {description!r}")
            seen.add(description)
            if len(description) > MAX_DESCRIPTION:
                problems.append(f"{rel}: [{i}] description longer than {MAX_DESCRIPTION} characters")
    return problems


def trace_bytes(trace: Any) -> bytes:
    """The trace a vector describes, as a file: a list becomes JSON Lines, a string is taken as is."""
    if isinstance(trace, str):
        return trace.encode("utf-8")
    return b"".join(orjson.dumps(record) + b"\n" for record in trace)


def _outcome(vector: Vector, valid: Any, errors: Iterable[tuple[str, int | None]],
             messages: list[str]) -> Outcome:
    got = frozenset(errors)
    passed = valid is vector.valid and got == vector.errors
    return Outcome(vector, passed, valid, got, None, messages)


def run_a3fast(vector: Vector) -> Outcome:
    """Run one vector through a3fast's own verifier."""
    from .verify import is_valid, verify_bytes

    findings = verify_bytes(trace_bytes(vector.trace))
    errors = [(f.code, f.seq) for f in findings if f.is_error]
    return _outcome(vector, is_valid(findings), errors, [str(f) for f in findings])


def verifier_argv(command: str | list[str]) -> list[str]:
    """A verifier command as an argument list (shell words for a string); ValueError naming what
    is wrong when it names no program or has an unclosed quote or a trailing escape."""
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ValueError(f"expected a command line, found {command!r}: {str(exc).lower()}") from None
    else:
        argv = list(command)
    if not argv or not all(isinstance(a, str) for a in argv) or not argv[0]:
        raise ValueError(f"expected a command line naming a program, found {command!r}")
    return argv


#: The longest a command may be given for one vector (or a matcher for one answer): an hour, as
#: `a3fast bench --timeout` allows; the system's waits overflow near 25 days, and no vector needs more.
MAX_TIMEOUT_S = 3600.0


class CommandNotStarted(Exception):
    """The verifier command could not be started at all (no such program, not executable, ...):
    no vector can be run, so this is the caller's bad option, not a failed vector."""


def run_command(command: str | list[str], timeout: float = 30.0) -> Callable[[Vector], Outcome]:
    """A runner that gives each vector's trace to `command` on standard input and reads its
    `--json` result from standard output (the first line that is a JSON object).

    ValueError for a command that names no program or does not parse as a shell would parse it,
    and for a timeout that is not a positive number of seconds up to MAX_TIMEOUT_S. The runner raises
    CommandNotStarted when the command cannot be started; a verifier that runs out its time,
    prints more than MAX_OUTPUT_BYTES, is ended by a signal or exits with another status than
    `a3fast verify`'s (VERIFY_EXIT_CODES), or prints no result fails that vector."""
    argv = verifier_argv(command)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise ValueError(f"timeout: expected a positive number of seconds up to {MAX_TIMEOUT_S:g}, "
                         f"found {timeout!r}")

    def run(vector: Vector) -> Outcome:
        try:
            done = _run_bounded(argv, trace_bytes(vector.trace), timeout)
        except OSError as exc:
            raise CommandNotStarted(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None
        stderr = done.stderr.decode("utf-8", "replace").strip().splitlines()
        tail = f" (stderr: {stderr[-1][:200]})" if stderr else ""
        if done.timed_out:
            return Outcome(vector, False, problem=f"the verifier ran past the timeout of {timeout:g} s{tail}")
        if done.too_long:
            return Outcome(vector, False, problem=f"the verifier printed more than {MAX_OUTPUT_BYTES} bytes{tail}")
        if done.returncode not in VERIFY_EXIT_CODES:
            # a verifier that crashed (a signal) or exited as `a3fast verify` never does: what it
            # printed before is no result to trust
            ended = (f"was ended by signal {-done.returncode}" if done.returncode < 0
                     else f"exited {done.returncode}")
            return Outcome(vector, False, problem=f"the verifier {ended}, not 0, 1 or 2{tail}")
        result = _read_result(done.stdout)
        if isinstance(result, str):
            return Outcome(vector, False, problem=f"{result}; exit {done.returncode}{tail}")
        valid, errors = result
        return _outcome(vector, valid, errors, [])

    return run


#: The exits of `a3fast verify` (0 valid, 1 invalid, 2 unreadable input, each with its result
#: printed): a verifier command's result counts only beside one of them.
VERIFY_EXIT_CODES = (0, 1, 2)
#: A verifier's standard output read for one vector, at most: a result is a line of a few KB; one
#: that prints without end fails its vector instead of filling memory.
MAX_OUTPUT_BYTES = 16 << 20
#: The end of a verifier's standard error kept, to quote its last line.
STDERR_TAIL_BYTES = 4096


@dataclass
class _Ran:
    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    too_long: bool = False


def _run_bounded(argv: list[str], data: bytes, timeout: float) -> _Ran:
    """`argv` run with `data` on standard input, in a session of its own: its output read up to
    MAX_OUTPUT_BYTES (the end of its standard error), and, once it ends, prints past that or runs
    out its time, every process it started is killed with it (one left behind would hold the
    output pipes open, or run on after the vector failed; a3fast.process_groups). OSError when it
    cannot be started."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    out = bytearray()
    err = bytearray()
    too_long = threading.Event()

    def feed() -> None:
        try:
            proc.stdin.write(data)       # type: ignore[union-attr]
        except OSError:                  # it stopped reading: what it prints says the rest
            pass
        finally:
            try:
                proc.stdin.close()       # type: ignore[union-attr]
            except OSError:
                pass

    def read_out() -> None:
        while chunk := proc.stdout.read1(1 << 16):     # type: ignore[union-attr]
            if len(out) + len(chunk) > MAX_OUTPUT_BYTES:
                too_long.set()           # the waiting thread stops the group
                return
            out.extend(chunk)

    def read_err() -> None:
        while chunk := proc.stderr.read1(1 << 16):     # type: ignore[union-attr]
            err.extend(chunk)
            del err[:-STDERR_TAIL_BYTES]

    threads = [threading.Thread(target=t, daemon=True) for t in (feed, read_out, read_err)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    while not process_groups.wait_exited(proc, min(0.05, max(0.0, deadline - time.monotonic()))):
        if too_long.is_set() or time.monotonic() >= deadline:
            break
    timed_out = not process_groups.exited(proc) and not too_long.is_set()
    process_groups.stop(proc)    # what it left running, or itself past its time or its output
    for thread in threads:
        thread.join()
    for pipe in (proc.stdout, proc.stderr):
        pipe.close()           # type: ignore[union-attr]
    return _Ran(proc.returncode, bytes(out), bytes(err), timed_out, too_long.is_set())


def _read_result(stdout: bytes) -> tuple[bool, list[tuple[str, int | None]]] | str:
    """(valid, [(code, seq)]) from a verifier's output, or what is wrong with the output."""
    for line in stdout.splitlines():
        if not line.strip():
            continue
        try:
            result = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(result, dict):
            continue
        valid, errors = result.get("valid"), result.get("errors")
        if not isinstance(valid, bool) or not isinstance(errors, list):
            return "the verifier's result lacks a boolean valid and an errors array"
        pairs = []
        for error in errors:
            if not isinstance(error, dict) or not isinstance(error.get("code"), str):
                return "an error in the verifier's result lacks a code"
            seq = error.get("seq")
            if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool)):
                return f"an error in the verifier's result has a seq that is not an integer: {seq!r}"
            pairs.append((error["code"], seq))
        return valid, pairs
    return "the verifier printed no JSON object"


def run_vectors(vectors: Iterable[Vector], runner: Callable[[Vector], Outcome] = run_a3fast,
                progress: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    outcomes = []
    for vector in vectors:
        outcome = runner(vector)
        outcomes.append(outcome)
        if progress is not None:
            progress(outcome)
    return outcomes


# ---------------------------------------------------------------------------------------------
# Matching vectors: fleet + requirements -> the explanation any matcher must give (§5, §6)

@dataclass(frozen=True)
class MatchResult:
    """A matcher's answer, as sets: what is compared."""

    filters_passed: frozenset[str]
    filters_failed: frozenset[tuple[str, str]]
    eligible: frozenset[str]

    @classmethod
    def of(cls, passed: Iterable[str], failed: Iterable[Any], eligible: Iterable[str]) -> "MatchResult":
        pairs = ((f["candidate"], f["predicate"]) for f in failed)
        return cls(frozenset(passed), frozenset(pairs), frozenset(eligible))

    def differences(self, other: "MatchResult") -> list[str]:
        """What `other` (the expected result) has that this lacks, and the reverse, per field."""
        out = []
        for name in ("filters_passed", "filters_failed", "eligible"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                out.append(f"{name}: missing {sorted(theirs - mine)}, unexpected {sorted(mine - theirs)}")
        return out


@dataclass(frozen=True)
class MatchingCase:
    file: str
    description: str
    fleet: list[Any]
    requirements: Any
    expected: MatchResult
    comment: str | None = None

    @property
    def id(self) -> str:
        return f"{self.file}:{self.description}"


def load_matching(root: Path) -> list[MatchingCase]:
    base = Path(root) / MATCHING_SUITE
    out = []
    for path in vector_files(root, MATCHING_SUITE):
        rel = path.relative_to(base).as_posix()
        for case in orjson.loads(path.read_bytes()):
            expected = case["expected"]
            out.append(MatchingCase(rel, case["description"], case["fleet"], case["requirements"],
                                    MatchResult.of(expected["filters_passed"], expected["filters_failed"],
                                                   expected["eligible"]), case.get("comment")))
    return out


def literal_match(case: MatchingCase) -> MatchResult:
    """The answer read literally from §5, one candidate at a time, with no index."""
    from .predicates import first_failed
    from .schema import parse_declaration, parse_requirements

    requirements = parse_requirements(case.requirements)
    failed, eligible = [], []
    for doc in case.fleet:
        decl = parse_declaration(doc)
        predicate = first_failed(decl, requirements.predicates)
        if predicate is None:
            eligible.append(decl.name)
        else:
            failed.append({"candidate": decl.name, "predicate": predicate})
    return MatchResult.of(requirements.predicates, failed, eligible)


def fleet_match(case: MatchingCase, engine: str | None = None) -> MatchResult:
    """a3fast's answer: the case's fleet placed on by `a3fast.Fleet` with the given engine."""
    from .fleet import Fleet

    fleet = Fleet(engine=engine)
    for doc in case.fleet:
        fleet.add(doc)
    placement = fleet.place(case.requirements)
    scheduling = placement.scheduling
    if scheduling is not None:
        return MatchResult.of(scheduling["filters_passed"], scheduling["filters_failed"], placement.eligible)
    rejection = placement.rejection
    assert rejection is not None  # a placement is bound or rejected
    return MatchResult.of(placement.predicates, rejection["filters_failed"], placement.eligible)

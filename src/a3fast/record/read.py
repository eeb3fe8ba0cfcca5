"""A task.bound's scheduling object (§6) read for verification (§7), from spec JSON.

Two readers, one result. The fast one decodes the usual shape of a full placement with msgspec
Structs that keep only what §7 reads — the names in `filters_failed` and in `scores`, `filters_passed`,
the two small documents — and skips the rest of the ~100 KB record without building it (the names in
`candidates`, score components, timings). Anything it does not recognise — a resumed placement, a
missing field, a value of another type — is read again by the generic reader, which checks every
field by hand and says what is wrong with each. Both end in the same `RecordedPlacement`, so every
check downstream is written once, and a property test holds the two readers to the same findings.
The compact form's reader (`compact_read`) ends in the same `RecordedPlacement`, its lists kept as
bitmaps: the verifier asks both forms the same questions through `FailedPredicates` and
`ScoredNames`.

What counts as malformed (E_STRUCTURE) is what §6 marks required and §7 reads: `requirements` and
`declaration` must parse as §4 and §3 documents, `filters_passed` must be predicate strings,
`filters_failed` entries `{candidate, predicate}` strings, `scores` an object of `{total, ...}`
objects with a numeric `total`, and `candidates` an array; every agent name (in `candidates`,
`filters_failed[].candidate` and the keys of `scores`) a non-empty string. `recorded_in: null`, like
`route: null`, counts as absent.
"""
from __future__ import annotations

from typing import Annotated, Any, Callable, Iterable, Mapping, Protocol, Sequence, Union

import msgspec
import orjson

from .. import document
from ..document import INT_MIN, MAX_RECORD_DEPTH
from ..errors import SchemaError, describe
from ..schema import Declaration, Requirements, parse_declaration, parse_requirements

__all__ = ["RecordedPlacement", "FailedPredicates", "ScoredNames", "SpecFailed", "ParsedDocuments",
           "read_scheduling", "read_typed", "parse_document", "read_route",
           "read_resumed", "ABSENT", "BOUND_RECORD", "NAME", "is_name"]


class _Absent:
    """A field the record does not carry (distinct from JSON null)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


class ScoredNames(Protocol):
    """The names in a record's `scores`: a spec record's object, or a compact record's id bitmap."""

    def __contains__(self, name: object) -> bool: ...

    def __len__(self) -> int: ...


class FailedPredicates(Protocol):
    """A record's `filters_failed`, as §7 asks it: in spec form a list of entries, in compact form
    one bitmap per predicate."""

    def predicate_of(self, candidate: str) -> str | None:
        """The predicate `filters_failed` gives for a candidate (its first entry), if it lists it."""

    def cross_check(self, scored: ScoredNames | None,
                    matched: Iterable[str] | None) -> tuple[list[str], set[str]]:
        """(names both failed and scored, failed predicates that are not among `matched`)."""


class SpecFailed:
    """`filters_failed` of a spec record: its entries, each with `.candidate` and `.predicate`."""

    __slots__ = ("entries",)

    def __init__(self, entries: Sequence[Any]):
        self.entries = entries

    def predicate_of(self, candidate: str) -> str | None:
        for entry in self.entries:
            if entry.candidate == candidate:
                return entry.predicate
        return None

    def cross_check(self, scored: ScoredNames | None,
                    matched: Iterable[str] | None) -> tuple[list[str], set[str]]:
        # One pass: the list is as long as the fleet, so it is walked once, with no set of its names.
        overlap: list[str] = []
        unmatched: set[str] = set()
        if scored is not None and matched is not None:
            matched_set = frozenset(matched)
            for entry in self.entries:
                if entry.candidate in scored:
                    overlap.append(entry.candidate)
                if entry.predicate not in matched_set:
                    unmatched.add(entry.predicate)
        elif scored is not None:
            overlap = [entry.candidate for entry in self.entries if entry.candidate in scored]
        elif matched is not None:
            unmatched = {entry.predicate for entry in self.entries}.difference(matched)
        return overlap, unmatched


class RecordedPlacement:
    """What §7 checks of one task.bound. A field that is absent or malformed is None, and each
    problem with it is one line in `problems` (reported as E_STRUCTURE).

    `failed` answers for `filters_failed` and `scored` for the names in `scores`, in either form;
    `recorded_in` is ABSENT unless the record cites an earlier explanation instead (§6)."""

    __slots__ = ("problems", "requirements", "declaration", "filters_passed", "failed", "scored",
                 "candidates_ok", "route", "resumed", "recorded_in")

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.requirements: Requirements | None = None
        self.declaration: Declaration | None = None
        self.filters_passed: list[str] | None = None
        self.failed: FailedPredicates | None = None
        self.scored: ScoredNames | None = None
        self.candidates_ok = False
        self.route: str | None = None
        self.resumed = False
        self.recorded_in: Any = ABSENT

    @property
    def full_explanation(self) -> bool:
        """Carries all four lists of §6, well formed: an explanation a resumed placement may cite."""
        return (self.candidates_ok and self.filters_passed is not None
                and self.failed is not None and self.scored is not None)

    def failed_predicate_of(self, candidate: str) -> str | None:
        """The predicate `filters_failed` gives for a candidate (its first entry), if it lists it."""
        return self.failed.predicate_of(candidate) if self.failed is not None else None

    @property
    def agent(self) -> tuple[str, str] | None:
        if self.declaration is None:
            return None
        return (self.declaration.agent.name, self.declaration.agent.namespace)


# ---------------------------------------------------------------------------------------------
# The two documents, shared by every reader of a trace.

_ANY = msgspec.json.Decoder()
#: A document in a task.bound line sits three levels in (record, content, scheduling).
_DOCUMENT_DEPTH_IN_RECORD = MAX_RECORD_DEPTH - 3
_PARSERS: dict[str, Callable[..., Any]] = {"requirements": parse_requirements, "declaration": parse_declaration}


def parse_document(value: Any, field: str) -> tuple[Any, list[str]]:
    """A record's requirements (§4) or declaration (§3) parsed, and the problems that keep it from
    parsing, each naming its path under `scheduling`."""
    path = f"scheduling.{field}"
    if value is ABSENT:
        return None, [f"{path}: expected the required field {field!r} (§6), found nothing"]
    try:
        return _PARSERS[field](value, path), []
    except SchemaError as exc:
        return None, [str(p) for p in exc.problems]


class BreaksTheRule(Exception):
    """A document in a task.bound line that breaks the document rule for the record (the generic
    path reports it, as E_TRACE)."""


class ParsedDocuments:
    """The requirements and declarations of one trace, parsed once per distinct JSON text while they
    repeat: a trace repeats the requirements of its tasks and the declarations of the agents it
    chooses often. Each field's entries are bounded (`LIMITS`), so that memory does not grow with
    the length of the trace: a fleet's worth of declarations would otherwise be kept."""

    LIMITS = {"requirements": 256, "declaration": 32}

    def __init__(self) -> None:
        self._parsed: dict[str, dict[bytes, tuple[Any, list[str]] | None]] = {f: {} for f in self.LIMITS}

    def from_json(self, field: str, text: bytes) -> tuple[Any, list[str]]:
        """A document given as the JSON text of a record; BreaksTheRule when it breaks the
        document rule as part of a record, msgspec's error when no decoder can hold it (1e400)."""
        parsed = self._parsed[field]
        hit = parsed.get(text, _MISSING)
        if hit is _MISSING:
            doc = _ANY.decode(text)
            hit = parse_document(doc, field)
            if hit[1] and not document.conforms(doc, _DOCUMENT_DEPTH_IN_RECORD, decoded_json=True):
                hit = None
            self._remember(field, text, hit)
        if hit is None:
            raise BreaksTheRule
        return hit[0], list(hit[1])

    def from_value(self, field: str, value: Any) -> tuple[Any, list[str]]:
        """A document given as a decoded value (read by the trace reader, which held it to the rule)."""
        if not isinstance(value, dict):
            return parse_document(value, field)
        try:
            text = orjson.dumps(value)
        except TypeError:
            return parse_document(value, field)
        hit = self._parsed[field].get(text)
        if hit is None:
            hit = parse_document(value, field)
            self._remember(field, text, hit)
        return hit[0], list(hit[1])

    def _remember(self, field: str, text: bytes, parsed: tuple[Any, list[str]] | None) -> None:
        entries = self._parsed[field]
        if len(entries) >= self.LIMITS[field]:
            entries.clear()
        entries[text] = parsed


_MISSING: Any = object()


#: What §6 means by an agent's name in `candidates`, `filters_failed` and `scores` (docs/design.md,
#: reading 3: `agent.name`): a non-empty string. §3's further bounds are not imposed here.
NAME = "an agent name (a non-empty string)"


def is_name(value: Any) -> bool:
    return type(value) is str and value != ""


def read_route(value: Any, record: RecordedPlacement) -> None:
    # null counts as absent: nothing is on record as having added anything.
    if value is ABSENT or value is None:
        return
    if isinstance(value, str) and value:
        record.route = value
    else:
        record.problems.append(f"scheduling.route: expected the name of a rule (a non-empty string), "
                               f"found {describe(value)}")


def read_resumed(content: Mapping[str, Any], scheduling: Mapping[str, Any]) -> bool:
    # §6 says the task.bound "carries resumed: true"; records put it beside or inside scheduling.
    return content.get("resumed") is True or scheduling.get("resumed") is True


# ---------------------------------------------------------------------------------------------
# The generic reader: any JSON value at all.

def read_scheduling(content: Any, documents: ParsedDocuments | None = None) -> RecordedPlacement:
    """Read a decoded task.bound content; never raises, whatever the value."""
    documents = documents or ParsedDocuments()
    record = RecordedPlacement()
    if not isinstance(content, Mapping):
        record.problems.append(f"content: expected an object carrying scheduling (§6), "
                               f"found {describe(content)}")
        return record
    scheduling = content.get("scheduling", ABSENT)
    if not isinstance(scheduling, Mapping):
        found = "nothing" if scheduling is ABSENT else describe(scheduling)
        record.problems.append(f"scheduling: expected an object (§6), found {found}")
        return record
    record.resumed = read_resumed(content, scheduling)
    record.requirements, problems = documents.from_value("requirements", scheduling.get("requirements", ABSENT))
    record.problems += problems
    record.declaration, problems = documents.from_value("declaration", scheduling.get("declaration", ABSENT))
    record.problems += problems
    recorded_in = scheduling.get("recorded_in", ABSENT)
    # null counts as absent, as for route: the record cites nothing, so it must explain itself.
    record.recorded_in = ABSENT if recorded_in is None else recorded_in
    if record.recorded_in is ABSENT:
        _read_lists(scheduling, record)
    read_route(scheduling.get("route", ABSENT), record)
    return record


def _missing(field: str, what: str) -> str:
    return (f"scheduling.{field}: expected {what} (§6; a resumed placement may instead carry "
            f"recorded_in), found nothing")


def _read_lists(scheduling: Mapping[str, Any], record: RecordedPlacement) -> None:
    problems = record.problems
    candidates = scheduling.get("candidates", ABSENT)
    if candidates is ABSENT:
        problems.append(_missing("candidates", "an array of agent names"))
    elif not isinstance(candidates, list):
        problems.append(f"scheduling.candidates: expected an array of agent names, found {describe(candidates)}")
    else:
        bad = [(i, c) for i, c in enumerate(candidates) if not is_name(c)]
        problems += [f"scheduling.candidates[{i}]: expected {NAME}, found {describe(c)}" for i, c in bad]
        record.candidates_ok = not bad

    passed = scheduling.get("filters_passed", ABSENT)
    if passed is ABSENT:
        problems.append(_missing("filters_passed", "an array of predicate strings"))
    elif not isinstance(passed, list):
        problems.append(f"scheduling.filters_passed: expected an array of predicate strings, found {describe(passed)}")
    else:
        bad = [(i, p) for i, p in enumerate(passed) if not isinstance(p, str)]
        problems += [f"scheduling.filters_passed[{i}]: expected a predicate string, found {describe(p)}"
                     for i, p in bad]
        if not bad:
            record.filters_passed = passed

    failed = scheduling.get("filters_failed", ABSENT)
    if failed is ABSENT:
        problems.append(_missing("filters_failed", "an array of {candidate, predicate}"))
    elif not isinstance(failed, list):
        problems.append(f"scheduling.filters_failed: expected an array of {{candidate, predicate}}, "
                        f"found {describe(failed)}")
    else:
        ok = True
        for i, entry in enumerate(failed):
            path = f"scheduling.filters_failed[{i}]"
            if not isinstance(entry, Mapping):
                problems.append(f"{path}: expected {{candidate, predicate}}, found {describe(entry)}")
                ok = False
                continue
            for key, what, good in (("candidate", NAME, is_name(entry.get("candidate"))),
                                     ("predicate", "a predicate string", isinstance(entry.get("predicate"), str))):
                if not good:
                    found = "nothing" if key not in entry else describe(entry[key])
                    problems.append(f"{path}.{key}: expected {what}, found {found}")
                    ok = False
        if ok:
            record.failed = SpecFailed([_Failed(entry["candidate"], entry["predicate"]) for entry in failed])

    scores = scheduling.get("scores", ABSENT)
    if scores is ABSENT:
        problems.append(_missing("scores", "an object of {total, ...} per eligible candidate"))
    elif not isinstance(scores, Mapping):
        problems.append(f"scheduling.scores: expected an object of {{total, ...}} per eligible candidate, "
                        f"found {describe(scores)}")
    else:
        ok = True
        for name, entry in scores.items():
            path = f"scheduling.scores[{name!r}]" if len(name) <= 60 else "scheduling.scores[…]"
            if not is_name(name):
                problems.append(f"scheduling.scores: expected each key to be {NAME}, found {describe(name)}")
                ok = False
                continue
            if not isinstance(entry, Mapping):
                problems.append(f"{path}: expected {{total, ...}}, found {describe(entry)}")
                ok = False
                continue
            total = entry.get("total", ABSENT)
            if not isinstance(total, (int, float)) or isinstance(total, bool):
                found = "nothing" if total is ABSENT else describe(total)
                problems.append(f"{path}.total: expected a number, found {found}")
                ok = False
        if ok:
            record.scored = scores


# ---------------------------------------------------------------------------------------------
# The fast reader: the usual shape of a full placement, typed; the rest of the record is skipped.

# Every type here bounds what it accepts (depth, integers within int64, names non-empty, no field
# it does not know), so that a record this reader accepts keeps the document rule without being walked
# (trace.read_lines relies on it); anything else falls back to the generic path, which checks the rule.
_Int = Annotated[int, msgspec.Meta(ge=INT_MIN, le=2**63 - 1)]
_Number = Union[_Int, float]
_Name = Annotated[str, msgspec.Meta(min_length=1)]


class _Failed(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    candidate: _Name
    predicate: str


class _Score(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    # a3fast.fleet.scoring's components; a record with others (a custom scorer) takes the generic path.
    total: _Number  # msgspec refuses booleans here, as the generic reader does
    affinity: _Number = 0
    success_rate: _Number = 0
    cost: _Number = 0
    substantiated: _Number = 0


class _Scheduling(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    requirements: msgspec.Raw
    declaration: msgspec.Raw
    candidates: list[_Name]
    filters_passed: list[str]
    filters_failed: list[_Failed]
    scores: dict[_Name, _Score]
    route: Union[str, None] = ABSENT
    resumed: Union[bool, None] = ABSENT
    recorded_in: Any = ABSENT
    # the session given beside the requirements (docs/design.md, reading 25); §7 does not read it
    session: Union[str, None] = msgspec.field(default=ABSENT, name="a3fast.session")
    session_held: Union[bool, None] = msgspec.field(default=ABSENT, name="a3fast.session_held")
    timings: dict[str, Union[_Number, str, None, dict[str, _Number]]] = ABSENT


class _BoundContent(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    scheduling: _Scheduling
    resumed: Union[bool, None] = ABSENT
    instance: str = ABSENT
    runtime: str = ABSENT


class _BoundRecord(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    seq: _Int
    kind: str
    content: _BoundContent


#: Decodes a whole task.bound line in one pass (for `trace.read_lines(typed=...)`).
BOUND_RECORD = msgspec.json.Decoder(_BoundRecord)


def read_typed(content: Any, documents: ParsedDocuments) -> RecordedPlacement | None:
    """A RecordedPlacement from content decoded by the typed decoder; None for a shape the generic
    reader must see (a resumed reference, a document that breaks the document rule or that no
    decoder can hold)."""
    s = content.scheduling
    if s.recorded_in is not ABSENT and s.recorded_in is not None:
        return None  # a resumed reference: the generic reader reads it
    # `resumed` is decoded but not kept: §7 reads it only beside recorded_in, which is not here
    record = RecordedPlacement()
    try:
        record.requirements, record.problems = documents.from_json("requirements", bytes(s.requirements))
        record.declaration, problems = documents.from_json("declaration", bytes(s.declaration))
    except (msgspec.MsgspecError, RecursionError, BreaksTheRule):
        return None  # no decoder can hold it (1e400), or it breaks the rule: the generic path says so
    record.problems += problems
    record.candidates_ok = True
    record.filters_passed = s.filters_passed
    record.failed = SpecFailed(s.filters_failed)
    record.scored = s.scores
    read_route(s.route, record)
    return record

"""A task.bound's scheduling object (§6) read for verification (§7).

Two readers, one result. The fast one decodes the usual shape of a full placement with msgspec
Structs that keep only what §7 reads — the names in `filters_failed` and in `scores`, `filters_passed`,
the two small documents — and skips the rest of the ~100 KB record without building it (the names in
`candidates`, score components, timings). Anything it does not recognise — a resumed placement, a
missing field, a value of another type — is read again by the generic reader, which checks every
field by hand and says what is wrong with each. Both end in the same `RecordedPlacement`, so every
check downstream is written once, and a property test holds the two readers to the same findings.

What counts as malformed (E_STRUCTURE) is what §6 marks required and §7 reads: `requirements` and
`declaration` must parse as §4 and §3 documents, `filters_passed` must be predicate strings,
`filters_failed` entries `{candidate, predicate}` strings, `scores` an object of `{total, ...}`
objects with a numeric `total`, and `candidates` an array; every agent name (in `candidates`,
`filters_failed[].candidate` and the keys of `scores`) a non-empty string. `recorded_in: null`, like
`route: null`, counts as absent.
"""
from __future__ import annotations

from typing import Annotated, Any, Mapping, Union

import msgspec

from . import document
from .document import INT_MIN, MAX_RECORD_DEPTH
from .errors import SchemaError, describe
from .schema import Declaration, Requirements, parse_declaration, parse_requirements

__all__ = ["RecordedPlacement", "read_scheduling", "read_scheduling_json", "read_typed", "ABSENT",
           "BOUND_RECORD", "NAME", "is_name"]


class _Absent:
    """A field the record does not carry (distinct from JSON null)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


class RecordedPlacement:
    """What §7 checks of one task.bound. A field that is absent or malformed is None, and each
    problem with it is one line in `problems` (reported as E_STRUCTURE).

    `failed` holds the entries of `filters_failed` (each with `.candidate` and `.predicate`);
    `scored` holds the names in `scores`; `recorded_in` is ABSENT unless the record cites an
    earlier explanation instead (§6)."""

    __slots__ = ("problems", "requirements", "declaration", "filters_passed", "failed", "scored",
                 "candidates_ok", "route", "resumed", "recorded_in")

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.requirements: Requirements | None = None
        self.declaration: Declaration | None = None
        self.filters_passed: list[str] | None = None
        self.failed: list[Any] | None = None
        self.scored: Any = None
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
        if hasattr(self.failed, "predicate_of"):  # a compact record's bitmaps
            return self.failed.predicate_of(candidate)
        for entry in self.failed or ():
            if entry.candidate == candidate:
                return entry.predicate
        return None

    @property
    def agent(self) -> tuple[str, str] | None:
        if self.declaration is None:
            return None
        return (self.declaration.agent.name, self.declaration.agent.namespace)


# ---------------------------------------------------------------------------------------------
# The two documents, shared by both readers. Requirements are cached by their JSON text (a trace
# repeats a few of them); declarations are parsed each time (~10 µs), since a fleet's worth of them
# would make the cache as large as the fleet.

_REQUIREMENTS_CACHE_LIMIT = 256
_requirements_cache: dict[bytes, tuple[Requirements | None, list[str]]] = {}
_ANY = msgspec.json.Decoder()
#: A document in a task.bound line sits three levels in (record, content, scheduling).
_DOCUMENT_DEPTH_IN_RECORD = MAX_RECORD_DEPTH - 3


def _parse_document(value: Any, field: str, parse) -> tuple[Any, list[str]]:
    path = f"scheduling.{field}"
    if value is ABSENT:
        return None, [f"{path}: expected the required field {field!r} (§6), found nothing"]
    try:
        return parse(value, path), []
    except SchemaError as exc:
        return None, [str(p) for p in exc.problems]


class _BreaksTheRule(Exception):
    """Requirements in a task.bound line that break the document rule for the record."""


def _parse_requirements_json(raw: Any) -> tuple[Requirements | None, list[str]]:
    """Requirements parsed once per distinct JSON text (a trace repeats a few); _BreaksTheRule when
    they break the document rule as part of a record (the generic path reports that as E_TRACE)."""
    key = bytes(raw)
    hit = _requirements_cache.get(key)
    if hit is None:
        if len(_requirements_cache) >= _REQUIREMENTS_CACHE_LIMIT:
            _requirements_cache.clear()
        doc = _ANY.decode(key)
        parsed = _parse_document(doc, "requirements", parse_requirements)
        if parsed[1] and not document.conforms(doc, _DOCUMENT_DEPTH_IN_RECORD, decoded_json=True):
            parsed = None
        hit = _requirements_cache[key] = parsed
    if hit is None:
        raise _BreaksTheRule
    return hit[0], list(hit[1])


#: What §6 means by an agent's name in `candidates`, `filters_failed` and `scores` (DESIGN
#: reading 3: `agent.name`): a non-empty string. §3's further bounds are not imposed here.
NAME = "an agent name (a non-empty string)"


def is_name(value: Any) -> bool:
    return type(value) is str and value != ""


def _read_route(value: Any, record: RecordedPlacement) -> None:
    # null counts as absent: nothing is on record as having added anything.
    if value is ABSENT or value is None:
        return
    if isinstance(value, str) and value:
        record.route = value
    else:
        record.problems.append(f"scheduling.route: expected the name of a rule (a non-empty string), "
                               f"found {describe(value)}")


def _read_resumed(content: Mapping[str, Any], scheduling: Mapping[str, Any]) -> bool:
    # §6 says the task.bound "carries resumed: true"; records put it beside or inside scheduling.
    return content.get("resumed") is True or scheduling.get("resumed") is True


# ---------------------------------------------------------------------------------------------
# The generic reader: any JSON value at all.

def read_scheduling(content: Any) -> RecordedPlacement:
    """Read a decoded task.bound content; never raises, whatever the value."""
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
    record.resumed = _read_resumed(content, scheduling)
    record.requirements, problems = _parse_document(
        scheduling.get("requirements", ABSENT), "requirements", parse_requirements)
    record.problems += problems
    record.declaration, problems = _parse_document(
        scheduling.get("declaration", ABSENT), "declaration", parse_declaration)
    record.problems += problems
    recorded_in = scheduling.get("recorded_in", ABSENT)
    # null counts as absent, as for route: the record cites nothing, so it must explain itself.
    record.recorded_in = ABSENT if recorded_in is None else recorded_in
    if record.recorded_in is ABSENT:
        _read_lists(scheduling, record)
    _read_route(scheduling.get("route", ABSENT), record)
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
            record.failed = [_Failed(entry["candidate"], entry["predicate"]) for entry in failed]

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
    # a3fast.scoring's components; a record with others (a custom scorer) takes the generic path.
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


_BOUND = msgspec.json.Decoder(_BoundContent)
#: Decodes a whole task.bound line in one pass (for `trace.read_lines(typed=...)`).
BOUND_RECORD = msgspec.json.Decoder(_BoundRecord)


def read_scheduling_json(content_json: Any) -> RecordedPlacement | None:
    """Read a task.bound content from its JSON text in the usual shape; None when the shape is
    another (the caller then decodes it and uses `read_scheduling`)."""
    try:
        content = _BOUND.decode(content_json)
    except (msgspec.MsgspecError, RecursionError):
        return None
    return read_typed(content)


def read_typed(content: Any) -> RecordedPlacement | None:
    """A RecordedPlacement from content decoded by the typed decoder; None for a shape the generic
    reader must see (a resumed reference, a document that breaks the document rule or that no
    decoder can hold)."""
    s = content.scheduling
    if s.recorded_in is not ABSENT and s.recorded_in is not None:
        return None  # a resumed reference: the generic reader reads it
    record = RecordedPlacement()
    record.resumed = content.resumed is True or s.resumed is True
    try:
        record.requirements, record.problems = _parse_requirements_json(s.requirements)
        declaration_doc = _ANY.decode(s.declaration)
    except (msgspec.MsgspecError, RecursionError, _BreaksTheRule):
        return None  # no decoder can hold it (1e400), or it breaks the rule: the generic path says so
    record.declaration, problems = _parse_document(declaration_doc, "declaration", parse_declaration)
    if problems and not document.conforms(declaration_doc, _DOCUMENT_DEPTH_IN_RECORD, decoded_json=True):
        return None  # the record breaks the document rule: the generic path says where
    record.problems += problems
    record.candidates_ok = True
    record.filters_passed = s.filters_passed
    record.failed = s.filters_failed
    record.scored = s.scores
    _read_route(s.route, record)
    return record

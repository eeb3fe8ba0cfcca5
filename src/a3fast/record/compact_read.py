"""The compact form read for verification (§7): a compact task.bound becomes the same
`RecordedPlacement` as its spec form, with `filters_failed` and `scores` kept as bitmaps, so the §7
checks become membership tests (docs/compact-format.md, "Verifying without decoding").

The compact member is read and checked by the codec's own reader (`Snapshots.read_member`), so a
record the verifier accepts is one the decoder can expand, and the two report the same problems.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from pyroaring import BitMap

from .compact import KEY, CompactMember, NameTable, Snapshots
from ..errors import describe
from .read import (ABSENT, NAME, ParsedDocuments, RecordedPlacement, ScoredNames, read_resumed,
                   read_route)

__all__ = ["CompactReader", "CompactFailed", "CompactScored"]


class CompactFailed:
    """`filters_failed` as one bitmap per predicate (a `read.FailedPredicates`)."""

    def __init__(self, predicates: list[str], bitmaps: list[BitMap], names: NameTable):
        self.predicates, self.bitmaps, self.names = predicates, bitmaps, names

    def predicate_of(self, candidate: str) -> str | None:
        aid = self.names.id_of(candidate)
        if aid is not None:
            for predicate, bitmap in zip(self.predicates, self.bitmaps):
                if aid in bitmap:
                    return predicate
        return None

    def cross_check(self, scored: ScoredNames | None,
                    matched: Iterable[str] | None) -> tuple[list[str], set[str]]:
        overlap: list[str] = []
        if isinstance(scored, CompactScored):
            for bitmap in self.bitmaps:
                overlap += [self.names.names[aid] for aid in bitmap & scored.ids]
        elif scored is not None:
            overlap = [self.names.names[aid] for bitmap in self.bitmaps for aid in bitmap
                       if self.names.names[aid] in scored]
        unmatched: set[str] = set()
        if matched is not None:
            matched_set = frozenset(matched)
            unmatched = {p for p, b in zip(self.predicates, self.bitmaps) if b and p not in matched_set}
        return overlap, unmatched


class CompactScored:
    """The names in `scores`, as the id bitmap of the score columns (a `read.ScoredNames`)."""

    def __init__(self, ids: BitMap, names: NameTable):
        self.ids, self.names = ids, names

    def __contains__(self, name: object) -> bool:
        aid = self.names.id_of(name)
        return aid is not None and aid in self.ids

    def __len__(self) -> int:
        return len(self.ids)


class CompactReader:
    """Reads the compact placement records of one trace for the verifier, keeping its snapshots;
    documents are parsed through the trace's one `ParsedDocuments`."""

    def __init__(self, documents: ParsedDocuments) -> None:
        self._snapshots = Snapshots()
        self._documents = documents

    def note(self, seq: int, content: Mapping[str, Any]) -> CompactMember:
        """Read a compact task.rejected (§7 reads only its reason, so its lists are never expanded),
        registering the fleet snapshot it may carry for the records after it."""
        return self._snapshots.read_member(seq, "task.rejected", dict(content))

    def read(self, seq: int, content: Mapping[str, Any]) -> RecordedPlacement:
        """A RecordedPlacement whose lists stay bitmaps. CompactError when the compact member cannot
        be read (the verifier reports it as E_STRUCTURE)."""
        member = self._snapshots.read_member(seq, "task.bound", dict(content))
        compact = content[KEY]
        record = RecordedPlacement()
        rest = member.rest
        # the spec record's other scheduling members are the compact member's `rest`: `resumed` and
        # `recorded_in` are read there as the spec reader reads them in scheduling
        record.resumed = read_resumed(content, compact) or read_resumed({}, rest)
        recorded_in = rest.get("recorded_in", ABSENT)
        record.recorded_in = ABSENT if recorded_in is None else recorded_in
        for field in ("requirements", "declaration"):
            value, problems = self._documents.from_value(field, compact.get(field, ABSENT))
            setattr(record, field, value)
            record.problems += problems
        record.filters_passed = member.predicates
        names = member.names
        empty = _empty_name_problems(member)
        record.problems += empty.candidates + empty.failed + empty.scored
        record.candidates_ok = not empty.candidates
        if not empty.failed:
            record.failed = CompactFailed(member.predicates, member.failed, names)
        totals = _total_problems(compact, member)
        if totals:
            record.problems += totals
        elif not empty.scored:
            record.scored = CompactScored(member.score_ids, names)
        read_route(member.rest.get("route", ABSENT), record)
        return record



def _total_problems(compact: Mapping[str, Any], member: CompactMember) -> list[str]:
    """What the spec reader says of the `scores` this record decodes to when an entry's `total` is
    not a number: a column of doubles or integers always holds numbers; a JSON column, or none, is
    read entry by entry, in the same words."""
    if not member.score_ids:
        return []
    kinds = {column[0]: column[1] for column in compact["scores"]["columns"]}    # checked by the codec
    if kinds.get("total") in ("f64", "i64"):
        return []
    totals = dict(member.score_columns).get("total")
    problems = []
    for k, aid in enumerate(member.score_ids):
        total = ABSENT if totals is None else totals[k]
        if not isinstance(total, (int, float)) or isinstance(total, bool):
            name = member.names.names[aid]
            path = f"scheduling.scores[{name!r}]" if len(name) <= 60 else "scheduling.scores[…]"
            problems.append(f"{path}.total: expected a number, found "
                            f"{'nothing' if total is ABSENT else describe(total)}")
    return problems


class _EmptyName(NamedTuple):
    candidates: list[str]
    failed: list[str]
    scored: list[str]


def _empty_name_problems(member: CompactMember) -> _EmptyName:
    """What the spec reader says of the lists this record decodes to when they hold the empty name
    (no agent name): a table may hold it for another record's lists, so only this record's are
    held to it, each at the place the decoded list has it."""
    empty = member.names.id_of("")
    if empty is None or empty not in member.candidates:  # candidates hold the failed and the scored
        return _EmptyName([], [], [])
    found = f"expected {NAME}, found string ''"
    candidates = [f"scheduling.candidates[{member.candidates.rank(empty) - 1}]: {found}"]
    failed, before = [], 0
    for ids in member.failed:
        if empty in ids:
            failed.append(f"scheduling.filters_failed[{before + ids.rank(empty) - 1}].candidate: {found}")
        before += len(ids)
    scored = [f"scheduling.scores: expected each key to be {NAME}, found string ''"] \
        if empty in member.score_ids else []
    return _EmptyName(candidates, failed, scored)

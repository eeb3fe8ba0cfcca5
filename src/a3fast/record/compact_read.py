"""The compact form read for verification (§7): a compact task.bound becomes the same
`RecordedPlacement` as its spec form, with `filters_failed` and `scores` kept as bitmaps, so the §7
checks become membership tests (docs/compact-format.md, "Verifying without decoding").

The compact member is read and checked by the codec's own reader (`Snapshots.read_member`), so a
record the verifier accepts is one the decoder can expand, and the two report the same problems.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

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
        if record.recorded_in is not ABSENT:
            # a reference, read as the spec reader reads one: the lists it carries are not its
            # explanation (the record it cites is), so they are neither kept nor held to anything
            read_route(member.rest.get("route", ABSENT), record)
            return record
        record.filters_passed = member.predicates
        names = member.names
        # the spec reader's problems of the lists this record decodes to, in its order
        empty = names.id_of("")
        candidates, failed = _empty_name_in_lists(member, empty)
        scores = _score_problems(compact, member, empty)
        record.problems += candidates + failed + scores
        record.candidates_ok = not candidates
        if not failed:
            record.failed = CompactFailed(member.predicates, member.failed, names)
        if not scores:
            record.scored = CompactScored(member.score_ids, names)
        read_route(member.rest.get("route", ABSENT), record)
        return record



_EMPTY_FOUND = f"expected {NAME}, found string ''"


def _empty_name_in_lists(member: CompactMember, empty: int | None) -> tuple[list[str], list[str]]:
    """What the spec reader says of the `candidates` and `filters_failed` this record decodes to when
    they hold the empty name (no agent name), at the places the decoded lists have it. A name table
    may hold it for another record's lists, so only this record's lists are held to it."""
    if empty is None:
        return [], []
    candidates = [f"scheduling.candidates[{member.candidates.rank(empty) - 1}]: {_EMPTY_FOUND}"] \
        if empty in member.candidates else []
    failed, before = [], 0
    for ids in member.failed:
        if empty in ids:
            failed.append(f"scheduling.filters_failed[{before + ids.rank(empty) - 1}].candidate: {_EMPTY_FOUND}")
        before += len(ids)
    return candidates, failed


def _score_problems(compact: Mapping[str, Any], member: CompactMember, empty: int | None) -> list[str]:
    """What the spec reader says of the `scores` this record decodes to, entry by entry in its order:
    the empty name as a key, or an entry whose `total` is not a number. A column of doubles or
    integers always holds numbers; a JSON column, or none, is read value by value."""
    if not member.score_ids:
        return []
    kinds = {column[0]: column[1] for column in compact["scores"]["columns"]}    # checked by the codec
    numeric = kinds.get("total") in ("f64", "i64")
    if numeric and (empty is None or empty not in member.score_ids):
        return []
    totals = dict(member.score_columns).get("total")
    names = member.names.names
    problems = []
    for k, aid in enumerate(member.score_ids):
        if aid == empty:
            problems.append(f"scheduling.scores: expected each key to be {NAME}, found string ''")
            continue
        total = ABSENT if totals is None else totals[k]
        if not numeric and (not isinstance(total, (int, float)) or isinstance(total, bool)):
            name = names[aid]
            path = f"scheduling.scores[{name!r}]" if len(name) <= 60 else "scheduling.scores[…]"
            problems.append(f"{path}.total: expected a number, found "
                            f"{'nothing' if total is ABSENT else describe(total)}")
    return problems

"""The compact placement encoding: the whole §6 explanation in a few KB, decoding to exactly the
spec record. The format is specified in docs/compact-format.md; this module is its reference.

A compact record is the spec record with its large lists replaced by one member, `a3fast.compact`:
agent ids instead of names (the name table is a fleet snapshot written once, inside the first record
that needs it, and referenced by seq afterwards), portable Roaring bitmaps (base64) instead of the
`candidates` and `filters_failed` lists, and typed columns instead of the `scores` object.
Snapshots ride inside records rather than as records of their own so that a compact trace keeps
the seq numbers of its spec form, and with them every `recorded_in` reference.

Hostile input: the public entry points (`Encoder`, `Decoder`, `encode_trace`, `decode_trace`) raise
no error but CompactError, whose message names the record's seq and the member's JSON path. The
encoder never refuses a record it can keep as it is: what it cannot encode losslessly stays in spec
form, byte for byte.
"""
from __future__ import annotations

import base64
import binascii
import itertools
import math
import struct
import sys
from array import array
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np
import orjson
from pyroaring import BitMap

from ..errors import A3Error, describe, json_path
from ..roaring import deserialize_ids as _deserialize, serialize_ids
from .write import (placement_records, reason_among, reason_derived, reason_text, scheduling_object, tail_json,
                    tail_members)

__all__ = ["FORMAT", "DERIVED_REASON_FORMAT", "KEY", "serialize_ids", "Encoder", "Decoder",
           "CompactError", "CompactMember", "Snapshots", "encode_trace", "decode_trace",
           "is_compact", "derived_reason"]

FORMAT = 1
#: Format 1 plus `derived_reason`: a rejection whose reason is the one its lists give leaves it out
#: (docs/compact-format.md, "Derived reasons"). Written only by records that use it, so every other
#: record stays readable by a format-1 decoder.
DERIVED_REASON_FORMAT = 2
_FORMATS = (FORMAT, DERIVED_REASON_FORMAT)
KEY = "a3fast.compact"
_EMPTY = ""
#: the only kinds with a compact form; elsewhere a member named `a3fast.compact` is ordinary content
_PLACEMENT_KINDS = ("task.bound", "task.rejected")
_ROOT = json_path("$.content", KEY)
#: Based snapshots written in a row before the whole name table is written again, so a reader
#: that starts mid-trace resolves a table from a bounded number of records.
MAX_BASED_CHAIN = 64


class CompactError(A3Error):
    """A record the compact codec cannot handle: a compact member outside the format (a wrong type
    or value, an unknown format, a missing snapshot, a bad bitmap), a record that is not a trace
    record, or an argument of the wrong type. The message names the seq and the JSON path."""


def _wrong(where: str, expected: str, found: Any) -> CompactError:
    return CompactError(f"{where}: expected {expected}, found {describe(found)}")


def _member(where: str, key: Any) -> str:
    return json_path(where, key) if isinstance(key, (str, int)) else f"{where}[{key!r}]"


def _first_repeat(items: Iterable[str]) -> str:
    """The first item seen a second time (callers know there is one)."""
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    raise ValueError("no item repeats")


def _only(obj: dict, allowed: tuple[str, ...], where: str, what: str) -> None:
    for key in obj:
        if key not in allowed:
            raise CompactError(f"{_member(where, key)}: not a member of {what} "
                               f"(expected only {', '.join(allowed)})")


def _require(obj: dict, required: tuple[str, ...], where: str) -> None:
    for key in required:
        if key not in obj:
            raise CompactError(f"{where}: expected a member {key!r}, found none")


def _check_arguments(seq: Any, kind: Any) -> None:
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise _wrong("seq", "an integer", seq)
    if not isinstance(kind, str):
        raise _wrong(f"seq {seq}: kind", "a string", kind)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise _wrong(what, "base64 text", text)
    try:
        raw = _strict_b64decode(text)
    except (ValueError, binascii.Error):
        raise CompactError(f"{what}: expected base64 text, found {describe(text)}") from None
    if not _canonical_b64(text, len(raw)):
        raise CompactError(f"{what}: expected base64 text as its bytes are written (padded to a whole "
                           f"group, the bits past the last byte zero), found {describe(text)}")
    return raw


#: Each base64 character's value, for the check of the bits past the last byte.
_B64_VALUES = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def _canonical_b64(text: str, n: int) -> bool:
    """Whether `text` is the one base64 text of its `n` bytes: a decoder also takes padding past a
    whole group and non-zero bits past the last byte, so two texts would stand for one set."""
    if len(text) != (n + 2) // 3 * 4:
        return False
    if text.endswith("=="):
        return not _B64_VALUES[text[-3]] & 0x0F
    if text.endswith("="):
        return not _B64_VALUES[text[-2]] & 0x03
    return True


def _strict_b64decode(text: str) -> bytes:
    # binascii's strict mode (3.11+) refuses what base64.b64decode(validate=True) refuses, twice as fast
    if sys.version_info >= (3, 11):
        return binascii.a2b_base64(text, strict_mode=True)
    return base64.b64decode(text, validate=True)


def _ids_text(ids) -> str:
    return _EMPTY if len(ids) == 0 else _b64(serialize_ids(ids))


def _bitmap(text: Any, what: str) -> BitMap:
    if text == _EMPTY:
        return BitMap()
    data = _unb64(text, what)
    try:
        return _deserialize(data)
    except ValueError as exc:
        raise CompactError(f"{what}: {exc}") from None


def _bitmap_within(text: Any, what: str, top: int) -> BitMap:
    """A bitmap whose ids all name an agent of a snapshot of `top` names (checked before any id is
    looked up: a few bytes of runs can stand for four billion ids)."""
    ids = _bitmap(text, what)
    if ids and ids.max() >= top:
        raise CompactError(f"{what}: agent id {ids.max()} is not in the fleet snapshot ({top} names)")
    return ids


# -- typed score columns ------------------------------------------------------------------------------
_COLUMN_DTYPES = {"f64": "<f8", "i64": "<i8"}


def _column(values: list[Any]) -> list[Any]:
    """[type, data]: 'f64' (little-endian doubles, base64) when every value is a finite float, 'i64'
    for ints, else 'json' (the values as they are). Floats keep every bit, -0.0 and 1e-300 included;
    NaN and infinity, which JSON cannot hold, go in a 'json' column like any other odd value."""
    if all(type(v) is float and math.isfinite(v) for v in values):
        return ["f64", _b64(_f64_bytes(values))]
    if all(type(v) is int and -2**63 <= v < 2**63 for v in values):
        return ["i64", _b64(np.asarray(values, dtype="<i8").tobytes())]
    return ["json", values]


def _column_values(column: Any, n: int, where: str) -> list[Any]:
    if not (isinstance(column, list) and len(column) == 3 and isinstance(column[0], str)
            and isinstance(column[1], str)):
        raise _wrong(where, "[name, type, data] with a string name and type", column)
    _, kind, data = column
    dtype = _COLUMN_DTYPES.get(kind)
    if dtype is not None:
        raw = _unb64(data, f"{where}[2]")
        if len(raw) != 8 * n:
            raise CompactError(f"{where}[2]: expected {n} 8-byte values, one per scored agent, "
                               f"found {len(raw)} bytes")
        column_array = np.frombuffer(raw, dtype=dtype)
        if kind == "f64" and not np.isfinite(column_array).all():
            raise CompactError(f"{where}[2]: expected finite doubles, found NaN or infinity (JSON has neither)")
        return column_array.tolist()
    if kind == "json":
        if not isinstance(data, list):
            raise _wrong(f"{where}[2]", "an array of values", data)
        if len(data) != n:
            raise CompactError(f"{where}[2]: expected {n} values, one per scored agent, found {len(data)}")
        return data
    raise _wrong(f"{where}[1]", "'f64', 'i64' or 'json'", kind)


# -- encoding -----------------------------------------------------------------------------------------
class Encoder:
    """Turns the records of one trace into compact form, writing each fleet snapshot once.

    `encode(seq, kind, content)` takes spec JSON content (from any implementation) and returns the
    content to write instead. Whatever would not decode to exactly what it was, byte for byte (a
    foreign order of its lists or members, wrong-typed members, a shape the format does not cover)
    comes back unchanged, so a trace may mix both forms; content already in compact form comes back
    unchanged too. `encode_placement` is the fast path for a3fast's own placements, and
    `encode_placement_lines` / `encode_placements_lines` give their trace lines, written by the
    engine in one call.
    """

    def __init__(self) -> None:
        self._names: list[str] = []
        self._ids: dict[str, int] = {}
        self._snapshot_seq: int | None = None
        self._snapshot_names = 0          # names the current snapshot covers
        self._live_text: str | None = None
        self._chain = 0                   # based snapshots since the last whole table
        self._decoder = Decoder()
        self._index: Any = None           # the engine index encode_placement's ids belong to
        self._membership: int | None = None  # the membership count of the last live set taken
        self._requirements_cache: dict[int, tuple[Any, tuple[bytes, bytes]]] = {}
        # Requirements written once, by id, held so that an id names one object (_SEEN_LIMIT at most)
        self._requirements_seen: dict[int, Any] = {}
        self._lines_index: Any = None     # the last index seen to write a placement's lines
        # what the engine's `write_placement_lines_of` reads: this encoder's requirements texts and
        # the module's predicates and task.admitted texts (all cleared in place, never replaced)
        self._line_caches = (self._requirements_cache, _CACHE_LIMIT, self._requirements_seen, _SEEN_LIMIT,
                             _predicates_cache, _CACHE_LIMIT, _admitted_cache, 16 * _CACHE_LIMIT)
        #: the fleet snapshot seq the last lines `encode_placement_lines` gave refer to, when each
        #: record among them with a compact member of its own refers to it by seq (the engine wrote
        #: them the usual way); None when they were written otherwise, and after `rewind`. Read it
        #: right after that call: other calls leave it alone. A reader that carries that snapshot
        #: can take those lines as they are without reading them (a stream's slice:
        #: `service.slices`; an object named like the member inside a task's requirements is never
        #: one a slice rewrites).
        self.plain_reference: int | None = None

    # -- from spec JSON --
    def encode(self, seq: int, kind: str, content: Any) -> Any:
        """The content to write for record `seq`; CompactError only for a seq that is not an
        integer or a kind that is not a string."""
        _check_arguments(seq, kind)
        if kind not in _PLACEMENT_KINDS or not isinstance(content, dict) or KEY in content:
            return content
        scheduling: dict[str, Any] = {}
        if kind == "task.bound":
            found = content.get("scheduling")
            if not (isinstance(found, dict) and "candidates" in found):
                return content
            scheduling = found
        elif not isinstance(content.get("candidates"), list):
            return content
        saved = (len(self._names), self._snapshot_seq, self._snapshot_names, self._live_text)
        compact = self._bound(seq, scheduling) if kind == "task.bound" else self._rejected(seq, content)
        if compact is not None:
            encoded = _replace(content, compact, kind)
            try:
                if _same_json(self._decoder.decode_content(seq, kind, encoded), content):
                    return encoded
            except CompactError:
                pass
        self._rollback(seq, *saved)
        return content

    def mark(self) -> tuple[Any, ...]:
        """Where `encode_placement` stands, for `rewind` when the records it encodes next are not
        written after all (a snapshot they carry would be referred to by later records)."""
        # the name list itself: a placement on another index since starts a list of its own
        return (self._names, len(self._names), self._snapshot_seq, self._snapshot_names, self._live_text,
                self._chain, self._index, self._membership)

    def rewind(self, mark: tuple[Any, ...]) -> None:
        """Back to `mark`: what was encoded since is as if it never was."""
        names, n_names, self._snapshot_seq, self._snapshot_names, self._live_text, self._chain, self._index, \
            self._membership = mark
        for name in names[n_names:]:
            self._ids.pop(name, None)
        del names[n_names:]
        self._names = names
        self.plain_reference = None

    def current_snapshot(self) -> tuple[int, list[str], str] | None:
        """(seq, names, live as base64) of the snapshot the next records refer to, if any."""
        if self._snapshot_seq is None or self._live_text is None:
            return None
        return self._snapshot_seq, self._names[:self._snapshot_names], self._live_text

    def current_live(self) -> tuple[int, str] | None:
        """(seq, live as base64) of the current snapshot, if any: `current_snapshot` without
        copying its names."""
        if self._snapshot_seq is None or self._live_text is None:
            return None
        return self._snapshot_seq, self._live_text

    def _rollback(self, seq: int, n_names: int, snapshot_seq, snapshot_names: int, live_text) -> None:
        for name in self._names[n_names:]:
            del self._ids[name]
        del self._names[n_names:]
        self._snapshot_seq, self._snapshot_names, self._live_text = snapshot_seq, snapshot_names, live_text
        self._decoder.forget(seq)

    def _intern(self, names: list[Any]) -> list[int] | None:
        ids = []
        for name in names:
            if not isinstance(name, str):
                return None
            aid = self._ids.get(name)
            if aid is None:
                aid = self._ids[name] = len(self._names)
                self._names.append(name)
            ids.append(aid)
        return ids

    def _fleet(self, seq: int, live_ids: list[int]) -> Any:
        """The `fleet` member: the current snapshot's seq, or a new snapshot when names were added
        or the live set changed."""
        live_text = _ids_text(sorted(live_ids))
        if self._snapshot_seq is not None and self._snapshot_names == len(self._names) \
                and live_text == self._live_text:
            return self._snapshot_seq
        if self._snapshot_seq is None or self._chain >= MAX_BASED_CHAIN:
            snapshot: dict[str, Any] = {"names": list(self._names)}
            self._chain = 0
        else:
            snapshot = {"base": self._snapshot_seq, "names_added": self._names[self._snapshot_names:]}
            self._chain += 1
        snapshot["live"] = live_text
        self._snapshot_seq, self._snapshot_names, self._live_text = seq, len(self._names), live_text
        return snapshot

    def _lists(self, seq: int, candidates: Any, predicates: Any, failed_pairs: Any) -> dict[str, Any] | None:
        if not (isinstance(candidates, list) and isinstance(predicates, list) and isinstance(failed_pairs, list)):
            return None
        if not all(isinstance(p, str) for p in predicates):
            return None
        candidate_ids = self._intern(candidates)
        if candidate_ids is None or candidate_ids != sorted(set(candidate_ids)):
            return None
        position = {p: k for k, p in enumerate(predicates)}
        groups: list[list[int]] = [[] for _ in predicates]
        for pair in failed_pairs:
            if not (isinstance(pair, dict) and set(pair) == {"candidate", "predicate"}):
                return None
            predicate, candidate = pair["predicate"], pair["candidate"]
            if not (isinstance(predicate, str) and isinstance(candidate, str)):
                return None
            k, aid = position.get(predicate), self._ids.get(candidate)
            if k is None or aid is None:
                return None
            groups[k].append(aid)
        return {"format": FORMAT, "fleet": self._fleet(seq, candidate_ids), "filters_passed": predicates,
                "failed": [_ids_text(sorted(g)) for g in groups]}

    def _bound(self, seq: int, s: dict[str, Any]) -> dict[str, Any] | None:
        compact = self._lists(seq, s.get("candidates"), s.get("filters_passed"), s.get("filters_failed"))
        scores = s.get("scores")
        if compact is None or not isinstance(scores, dict) or "requirements" not in s or "declaration" not in s:
            return None
        score_ids = self._intern(list(scores))
        entries = list(scores.values())
        if score_ids is None or score_ids != sorted(score_ids) or not all(isinstance(e, dict) for e in entries):
            return None
        columns = list(entries[0]) if entries else []
        if any(list(e) != columns for e in entries):
            return None
        compact["scores"] = {"ids": _ids_text(score_ids),
                             "columns": [[c, *_column([e[c] for e in entries])] for c in columns]}
        compact["requirements"] = s["requirements"]
        compact["declaration"] = s["declaration"]
        rest = {k: v for k, v in s.items() if k not in _SCHEDULING_LISTS}
        if rest:
            compact["rest"] = rest
        return compact

    def _rejected(self, seq: int, content: dict[str, Any]) -> dict[str, Any] | None:
        failed = content.get("filters_failed")
        if not isinstance(failed, list) \
                or not all(isinstance(p, dict) and isinstance(p.get("predicate"), str) for p in failed):
            return None
        predicates = list(dict.fromkeys(p["predicate"] for p in failed))
        compact = self._lists(seq, content.get("candidates"), predicates, failed)
        if compact is not None and _reason_derives(content, predicates, failed):
            compact["format"] = DERIVED_REASON_FORMAT
            compact["derived_reason"] = True
        return compact

    # -- from a Placement --
    def encode_placement(self, seq: int, placement, task: Mapping[str, Any] | None = None, *,
                         restricted: bool = False) -> list[tuple[str, bytes]]:
        """The trace records of a Placement (starting at `seq`) with compact content, built from
        the engine's id sets without producing the spec lists; `task` adds members to
        task.submitted, as in `placement_records`. Use one Encoder per trace, and either this or
        `encode`, not both. `restricted`: the placement was over some of the fleet's agents only
        (`Fleet.place(candidates=...)`), so its candidates are not the live set of the fleet's
        generation: they are written (a new snapshot when they differ), and the next placement's
        are checked again."""
        p = placement
        args = self._line_arguments(seq, p, task, restricted)
        if args is None:
            return self._records(seq, p, task, restricted)
        # the records' contents, cut from the lines the engine wrote (their heads have known lengths)
        lines = p.index.write_placement_lines(*args)
        submitted_json, admitted_json = args[4], args[5]
        # a line is `{"seq":N,"kind":"K","content":` (28 bytes besides N and K), the content, `}\n`
        at = 42 + len(str(seq))
        out = [("task.submitted", submitted_json)]
        at += len(submitted_json) + 2
        if admitted_json is not None:
            out.append(("task.admitted", admitted_json))
            at += 41 + len(str(seq + 1)) + len(admitted_json) + 2
            out.append(("task.bound", lines[at + 38 + len(str(seq + 2)):-2]))
        else:
            out.append(("task.rejected", lines[at + 41 + len(str(seq + 1)):-2]))
        return out

    def encode_placement_lines(self, seq: int, placement, task: Mapping[str, Any] | None = None, *,
                               restricted: bool = False) -> tuple[bytes, int]:
        """The trace lines of `encode_placement`'s records, framed as `trace.record_lines` frames
        them (seq numbers from `seq`), and how many records they are; the engine writes them in
        one call."""
        index = placement.index
        if index is self._index and index is self._lines_index and not restricted and _native_seq(seq):
            # the usual placement: the engine gathers its arguments and writes its lines in one call
            written = index.write_placement_lines_of(seq, placement, task, self._membership, self._snapshot_seq,
                                                     self._line_caches)
            if written is not None:
                self.plain_reference = self._snapshot_seq
                return written
        self.plain_reference = None
        return self._lines_gathered_here(seq, placement, task, restricted)

    def encode_placements_lines(self, seq: int, placements: Iterable[Any],
                                tasks: Iterable[Mapping[str, Any] | None] | None = None, *,
                                restricted: bool = False) -> tuple[bytes, list[int]]:
        """The trace lines of many placements, in order, numbered from `seq`, and how many records
        each placement wrote: `encode_placement_lines` of each, joined. The engine gathers and
        writes each run of usual placements in one call, into one buffer."""
        placements = list(placements)
        task_list = list(tasks) if tasks is not None else None
        if task_list is not None and len(task_list) != len(placements):
            raise ValueError(f"{len(task_list)} tasks for {len(placements)} placements")
        parts: list[bytes] = []
        counts: list[int] = []
        i, n = 0, len(placements)
        refused = False         # the engine ended its last run at placements[i]: not one it gathers
        while i < n:
            p = placements[i]
            index = p.index
            if not refused and index is self._index and index is self._lines_index and not restricted \
                    and _native_seq(seq):
                # the run of usual placements from here, gathered and written by the engine after the
                # lines before it while they are few (the usual batch: one placement's, which took
                # the snapshot), so the whole is one buffer, never copied again by a join
                prefix = parts.pop() if len(parts) == 1 and len(parts[0]) <= _PREFIX_LIMIT else b""
                lines, run = index.write_placements_lines_of(seq, placements, task_list, i, self._membership,
                                                            self._snapshot_seq, self._line_caches, prefix)
                parts.append(lines)
                if run:
                    counts += run
                    seq += sum(run)
                    i += len(run)
                    refused = True
                    continue
            refused = False
            lines, count = self._lines_gathered_here(seq, p, None if task_list is None else task_list[i],
                                                     restricted)
            parts.append(lines)
            counts.append(count)
            seq += count
            i += 1
        return b"".join(parts), counts

    def _lines_gathered_here(self, seq: int, p, task: Mapping[str, Any] | None,
                             restricted: bool) -> tuple[bytes, int]:
        """A placement's lines with their arguments gathered in Python (`_line_arguments`): the
        first of a trace or of a new snapshot, and the unusual ones (a route, a custom scorer, a
        resumption, an index without the engine's gathering). A placement the format cannot carry
        (a custom scorer's entries with differing components) is written in spec form, as
        `encode_trace` leaves such a record, and moves nothing of the encoder's."""
        if p.bound and p.custom_scores and not p.resumed and not _uniform(p.scores.entries):
            records = list(placement_records(p, task))
            return _lines(records, seq), len(records)
        args = self._line_arguments(seq, p, task, restricted)
        if args is None:
            records = self._records(seq, p, task, restricted)
            return _lines(records, seq), len(records)
        return p.index.write_placement_lines(*args), 3 if args[5] is not None else 2

    def _records(self, seq: int, p, task: Mapping[str, Any] | None, restricted: bool) -> list[tuple[str, bytes]]:
        """The records of a placement the engine's line writer does not write: a resumed one, or
        one on an index without the writer (a sharded fleet's merged view)."""
        if p.resumed:
            return list(placement_records(p))
        kinds = _BOUND_KINDS if p.bound else _REJECTED_KINDS
        out = []
        for offset, kind in enumerate(kinds):
            if kind == "task.submitted":
                content = orjson.dumps({**(task or {}), "requirements": p.submitted.doc})
            elif kind == "task.admitted":
                content = orjson.dumps({"agent": p.declaration.agent.to_dict()})
            else:
                content = self._placement_content(seq + offset, p, restricted)
            out.append((kind, content))
        return out

    def _line_arguments(self, seq: int, p, task: Mapping[str, Any] | None,
                        restricted: bool) -> tuple[Any, ...] | None:
        """The arguments of the engine's `write_placement_lines` for placement `p` at `seq`, the
        encoder's snapshot state moved on as the records take it; None (nothing moved) when the
        records are written another way."""
        if p.resumed or not _native_seq(seq):
            return None
        index = p.index
        if index is not self._lines_index:
            if not hasattr(index, "write_placement_lines"):
                return None
            self._lines_index = index
        expl = p.explanation
        bound = p.bound
        scores = scores_json = declaration_json = admitted_json = reason_json = None
        if bound:
            if p.custom_scores:
                # a bound placement scores at least its chosen agent: ids are never empty
                scores_json = orjson.dumps({"ids": _b64(expl.eligible_roaring()),
                                            "columns": _custom_columns(p.scores.entries)})
            else:
                scores = p.scores
            declaration_json = p.declaration_json
            admitted_json = _admitted_json(p.declaration.agent)
        requirements = p.requirements
        prepared = p.prepared
        requirements_json, predicates_json = self._requirements_json(requirements, prepared)
        submitted = p.submitted
        if task:
            submitted_json = orjson.dumps({**task, "requirements": submitted.doc})
        else:
            # under a route, the submitted Requirements may be the caller's own, placed again (the
            # routed one is new each time): noted, and held only in the window, if it is not
            submitted_json = b'{"requirements":%b}' % (
                requirements_json if submitted is requirements
                else self._requirements_json(submitted, prepared or p.route is not None)[0])
        derived = not bound and reason_derived(p)
        if not bound and not derived:
            reason_json = orjson.dumps(reason_text(p))
        fleet = self._fleet_member(seq + (2 if bound else 1), p, restricted)
        fleet_json = b"%d" % fleet if type(fleet) is int else orjson.dumps(fleet)
        return (seq, expl, scores, scores_json, submitted_json, admitted_json, fleet_json, predicates_json,
                requirements_json, declaration_json, reason_json, derived, tail_json(p))

    def _requirements_json(self, requirements, prepared: bool) -> tuple[bytes, bytes]:
        """A Requirements' document and its predicates (filters_passed) as JSON, kept per
        Requirements object from its second placement on: a prepared one is placed many times, and
        its document is read as it was when prepared. One the placement parsed itself (`prepared`
        false: the caller gave a dict, or a route added to it) is never placed again and is neither
        kept nor noted. A prepared one placed for the first time is noted, held by its id among the
        last `_SEEN_LIMIT` so noted: holding it is what makes the id name that object (a freed
        object's id is reused at once, by the next task parsed), and the window bounds what a
        stream of one-off tasks keeps alive."""
        cache = self._requirements_cache
        key = id(requirements)
        hit = cache.get(key)
        if hit is not None and hit[0] is requirements:
            return hit[1]
        texts = (orjson.dumps(requirements.doc), _predicates_json(requirements.predicates))
        if not prepared:
            return texts
        seen = self._requirements_seen
        if seen.get(key) is not requirements:
            if len(seen) >= _SEEN_LIMIT:
                seen.clear()
            seen[key] = requirements
            return texts
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = (requirements, texts)  # the object held, so its id is not reused meanwhile
        return texts

    def _fleet_member(self, seq: int, p, restricted: bool) -> Any:
        """The `fleet` member of placement `p`'s record `seq`: the current snapshot's seq, or a
        new snapshot."""
        index = p.index
        # the live set is taken again when it may have changed: another index, another membership
        # count (when the placement knows it; a held session changes the generation, not who is live)
        if restricted or index is not self._index or p.membership is None or p.membership != self._membership:
            if index is not self._index:
                self._names, self._snapshot_seq, self._snapshot_names, self._live_text = [], None, 0, None
            self._index, self._membership = index, p.membership
            live = p.explanation.candidate_ids()
            top = live[-1] + 1 if live else 0
            self._names.extend(index.name(i) for i in range(len(self._names), top))
            fleet = self._fleet(seq, live)
            if restricted:
                self._membership = None
            return fleet
        return self._snapshot_seq

    def _placement_content(self, seq: int, p, restricted: bool = False) -> bytes:
        expl = p.explanation
        index = p.index
        fleet = self._fleet_member(seq, p, restricted)
        # The engine writes the large members (the failed sets, the score columns) straight from its
        # words; Python joins a few byte strings around them, exactly as orjson would write the dict.
        default_scores = p.bound and not p.custom_scores
        lists = index.write_compact_lists(expl, p.scores if default_scores else None)
        derive = not p.bound and reason_derived(p)
        head = b'{"format":%d,"fleet":%b,"filters_passed":%b,%b' % (
            DERIVED_REASON_FORMAT if derive else FORMAT, orjson.dumps(fleet), orjson.dumps(p.predicates), lists)
        tail = tail_members(p)
        if not p.bound:
            if derive:
                head += b',"derived_reason":true'
                content = {"code": "unschedulable", "requirements": p.requirements.doc}
            else:
                content = {"code": "unschedulable", "reason": reason_text(p),
                           "requirements": p.requirements.doc}
            return b'%b,"%b":%b},%b}' % (orjson.dumps(content)[:-1], _KEY_BYTES, head, orjson.dumps(tail)[1:-1])
        scores = b""
        if not default_scores:  # a bound placement scores at least its chosen agent: ids are never empty
            scores = b',"scores":' + orjson.dumps({"ids": _b64(expl.eligible_roaring()),
                                                   "columns": _custom_columns(p.scores.entries)})
        return b'{"%b":%b%b,"requirements":%b,"declaration":%b,"rest":%b}}' % (
            _KEY_BYTES, head, scores, orjson.dumps(p.requirements.doc), p.declaration_json, orjson.dumps(tail))


_BOUND_KINDS = ("task.submitted", "task.admitted", "task.bound")
_REJECTED_KINDS = ("task.submitted", "task.rejected")
#: the most bytes of lines a batch passes the engine to write ahead of a run in the run's own
#: buffer (`encode_placements_lines`): a few placements' worth, copied once more for each such run
_PREFIX_LIMIT = 1 << 16
#: entries a JSON cache keeps before it starts again (the values repeat: a fleet's agents, a
#: workload's predicate sets, a client's prepared requirements)
_CACHE_LIMIT = 4096


def _native_seq(seq: int) -> bool:
    """Whether a placement's seqs (at most three from `seq`) fit the engine's line writer, which
    numbers lines in a signed 64-bit integer; a trace's seqs go on to 2^64-1 through the records'
    Python path, the same bytes."""
    return -(1 << 63) <= seq <= (1 << 63) - 3

#: prepared Requirements noted after their first placement, held until this many are (a prepared
#: task placed again within that window is kept from its second placement on)
_SEEN_LIMIT = 256
_predicates_cache: dict[tuple[str, ...], bytes] = {}
_admitted_cache: dict[Any, bytes] = {}


def _predicates_json(predicates: tuple[str, ...]) -> bytes:
    if type(predicates) is not tuple:
        return orjson.dumps(predicates)
    text = _predicates_cache.get(predicates)
    if text is None:
        text = orjson.dumps(predicates)
        if len(_predicates_cache) >= _CACHE_LIMIT:
            _predicates_cache.clear()
        _predicates_cache[predicates] = text
    return text


def _admitted_json(agent) -> bytes:
    """task.admitted's content for a chosen agent (its `{name, namespace}`)."""
    text = _admitted_cache.get(agent)
    if text is None:
        text = orjson.dumps({"agent": agent.to_dict()})
        if len(_admitted_cache) >= 16 * _CACHE_LIMIT:
            _admitted_cache.clear()
        _admitted_cache[agent] = text
    return text


def _lines(records: list[tuple[str, bytes]], seq: int) -> bytes:
    """Trace lines of a placement's records (the framing of `trace.record_line`)."""
    return b"".join([b'{"seq":%d,"kind":"%b","content":%b}\n' % (seq + i, kind.encode(), content)
                     for i, (kind, content) in enumerate(records)])


_KEY_BYTES = KEY.encode()


def _uniform(entries: list[dict[str, Any]]) -> bool:
    """Whether every entry of a custom scorer names the same components in the same order: what
    the compact form's score columns can carry."""
    names = list(entries[0]) if entries else []
    return all(list(e) == names for e in entries)


def _custom_columns(entries: list[dict[str, Any]]) -> list[list[Any]]:
    """The score columns of a custom scorer's entries (the engine writes the default scorer's)."""
    if not _uniform(entries):
        raise CompactError("custom scores with differing components have no compact form")
    names = list(entries[0]) if entries else []
    return [[c, *_column([e[c] for e in entries])] for c in names]


def _f64_bytes(values) -> bytes:
    column = array("d", values)
    if sys.byteorder != "little":
        column.byteswap()
    return column.tobytes()


_SCHEDULING_LISTS = ("requirements", "declaration", "candidates", "filters_passed", "filters_failed", "scores")


#: the members of a record's content that its compact member stands for, by kind
_COMPACTED = {"task.bound": ("scheduling",), "task.rejected": ("candidates", "filters_failed")}


def _reason_derives(content: dict[str, Any], predicates: list[str], failed: list[dict[str, str]]) -> bool:
    """Whether a rejection's reason is the text its lists give, in the place decoding puts it
    (right after `code`, or first): then the compact form leaves it out."""
    reason, candidates = content.get("reason"), content.get("candidates")
    if not (isinstance(reason, str) and candidates):
        return False
    keys = list(content)
    if keys.index("reason") != (keys.index("code") + 1 if "code" in content else 0):
        return False
    names: dict[str, list[str]] = {p: [] for p in predicates}
    for pair in failed:
        names[pair["predicate"]].append(pair["candidate"])
    return reason == reason_among(len(candidates), [(p, ", ".join(names[p])) for p in predicates])


def _replace(content: dict[str, Any], compact: dict[str, Any], kind: str) -> dict[str, Any]:
    """The content with its spec lists (scheduling, or candidates + filters_failed) replaced by
    the compact member, which takes the place of the first of them; a derived reason is left out."""
    out: dict[str, Any] = {}
    replaced = _COMPACTED[kind]
    if compact.get("derived_reason"):
        replaced = (*replaced, "reason")
    for key, value in content.items():
        if key == "reason" and key in replaced:
            continue
        if key in replaced:
            out.setdefault(KEY, compact)
        else:
            out[key] = value
    return out


def _same_json(a: Any, b: Any) -> bool:
    """Whether two values are the same JSON text: `==` alone takes {"a":1,"b":2} for {"b":2,"a":1},
    1 for 1.0 and true, 0.0 for -0.0."""
    try:
        return orjson.dumps(a) == orjson.dumps(b)
    except TypeError:  # beyond orjson: integers over 64 bits, nesting deeper than 255 levels
        return _identical(a, b)


def _identical(a: Any, b: Any) -> bool:
    """`_same_json` for what orjson cannot write: same types, member order and float bits, compared
    without recursion (any depth)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
            stack.extend(zip(x.values(), y.values()))
        elif isinstance(x, (list, tuple)):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif isinstance(x, float):
            if struct.pack("<d", x) != struct.pack("<d", y):
                return False
        elif x != y:
            return False
    return True


# -- decoding -----------------------------------------------------------------------------------------
_SNAPSHOT_NAMES = ("names", "live")
_SNAPSHOT_BASED = ("base", "names_added", "live")


class NameTable(Sequence[str]):
    """A fleet snapshot's agent names, id -> name, with the id of a name.

    A based snapshot extends its base, and a3fast's writers base each snapshot on the one before,
    so a trace's tables are usually prefixes of one another: a table that extends the longest
    table of its line appends to the list and the name -> id map they share, and keeps only its
    length. So reading a trace keeps each name once, however many snapshots a churning fleet
    writes; a whole table written again (a writer does so every so often) that lists the names of
    the line, or more, shares it too. A copy is made only for a table based on one that another has
    already extended, or a whole table that is no prefix of the line.
    `names` is that shared list: an id within the table (every id of a checked bitmap is) indexes
    it directly, which the loops over a record's lists do."""

    __slots__ = ("names", "_ids", "_length")

    def __init__(self, names: list[str], ids: dict[str, int], length: int) -> None:
        self.names, self._ids, self._length = names, ids, length

    @classmethod
    def of(cls, names: list[str], where: str) -> "NameTable":
        """The table of a snapshot that lists every name (CompactError for a name given twice)."""
        ids = {name: i for i, name in enumerate(names)}
        if len(ids) != len(names):
            raise CompactError(f"{where}: the name {_first_repeat(names)!r} has two agent ids")
        return cls(list(names), ids, len(names))

    def sharing(self, names: list[str], where: str) -> "NameTable":
        """The table of a snapshot that lists every name, sharing this table's line where `names`
        is a prefix of it or extends it (a writer lists a whole table now and then, the fleet's
        names as they stand): else a table of its own, `NameTable.of`."""
        line, n = self.names, len(names)
        if n <= len(line) and line[:n] == names:
            return NameTable(line, self._ids, n)
        if n > len(line) and names[:len(line)] == line:
            return NameTable(line, self._ids, len(line)).extended(names[len(line):], where)
        return NameTable.of(names, where)

    def branched(self) -> bool:
        """Whether another table extends this one's list already (`extended` then copies it)."""
        return len(self.names) != self._length

    def extended(self, added: list[str], where: str) -> "NameTable":
        """This table with `added` given the next ids (CompactError for a name it already holds)."""
        if not added:
            return self
        names, ids, length = self.names, self._ids, self._length
        if self.branched():  # another table extends this one's list already: a line of its own
            names, ids = names[:length], {name: i for i, name in enumerate(names[:length])}
        at = length
        for name in added:
            if name in ids:
                del names[length:]     # nothing of a refused snapshot stays in a shared list
                for undo in added[:at - length]:
                    del ids[undo]
                raise CompactError(f"{where}: the name {name!r} has two agent ids")
            ids[name] = at
            names.append(name)
            at += 1
        return NameTable(names, ids, at)

    def id_of(self, name: object) -> int | None:
        aid = self._ids.get(name) if isinstance(name, str) else None
        return aid if aid is not None and aid < self._length else None

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.names[:self._length][index]
        if not -self._length <= index < self._length:
            raise IndexError("agent id not in the fleet snapshot")
        return self.names[index % self._length]

    def __contains__(self, name: object) -> bool:
        return self.id_of(name) is not None

    def __iter__(self) -> Iterator[str]:
        return itertools.islice(self.names, self._length)

    def index(self, name: Any, start: int = 0, stop: int | None = None) -> int:
        aid = self.id_of(name)
        if aid is None or aid < start or (stop is not None and aid >= stop):
            raise ValueError(f"{name!r} is not in the fleet snapshot")
        return aid


#: A based snapshot whose base another has extended already is a table of its own: a copy of its
#: base's names (`NameTable.extended`). a3fast's writers base each snapshot on the one before, so a
#: trace rarely makes one; a trace that bases many small records on one large table would make a
#: copy of it per record, and hold them all: the names copied are held to this many times the names
#: the trace's snapshot objects list, plus COPY_ALLOWANCE, and a snapshot past that is refused.
COPY_FACTOR = 4
COPY_ALLOWANCE = 250_000


class Snapshots:
    """Fleet snapshots seen so far in a trace: seq -> (name table, live set as base64)."""

    def __init__(self) -> None:
        self.tables: dict[int, tuple[NameTable, str]] = {}
        self._latest: NameTable | None = None   # the line a whole table written later may share
        self.unreadable: set[int] = set()  # records whose snapshot object could not be read
        self._listed = 0    # names the snapshot objects read so far list or add
        self._copied = 0    # names copied for based tables (COPY_FACTOR)

    def forget(self, seq: int) -> None:
        self.tables.pop(seq, None)
        self.unreadable.discard(seq)

    def read_member(self, seq: int, kind: str, content: dict[str, Any]) -> CompactMember:
        """The compact member of a task.bound or task.rejected content, checked against the format;
        its snapshot is registered under `seq`, or the record is remembered as unreadable."""
        try:
            return _read_member(self, seq, kind, content)
        except CompactError:
            compact = content[KEY]
            if isinstance(compact, dict) and isinstance(compact.get("fleet"), dict):
                self.unreadable.add(seq)
            raise

    def resolve(self, fleet: Any, where: str) -> tuple[NameTable, str]:
        """The snapshot a `fleet` member stands for, without registering it."""
        if isinstance(fleet, int) and not isinstance(fleet, bool):
            table = self.tables.get(fleet)
            if table is None and fleet in self.unreadable:
                raise CompactError(f"{where}: fleet snapshot {fleet} is in a record that could not be read")
            if table is None:
                raise CompactError(f"{where}: fleet snapshot {fleet} is not earlier in the trace")
            return table
        if not isinstance(fleet, dict):
            raise _wrong(where, "a snapshot seq or a snapshot object", fleet)
        if "names" in fleet:
            _only(fleet, _SNAPSHOT_NAMES, where, "a fleet snapshot")
            listed = _names(fleet["names"], f"{where}.names")
            self._listed += len(listed)
            _require(fleet, ("live",), where)
            # the live set is checked before a shared list grows by what the table lists
            _bitmap_within(fleet["live"], f"{where}.live", len(listed))
            names = self._latest.sharing(listed, f"{where}.names") if self._latest is not None \
                else NameTable.of(listed, f"{where}.names")
        elif "base" in fleet:
            _only(fleet, _SNAPSHOT_BASED, where, "a fleet snapshot")
            _require(fleet, ("names_added",), where)
            base = fleet["base"]
            if not isinstance(base, int) or isinstance(base, bool):
                raise _wrong(f"{where}.base", "the seq of an earlier snapshot", base)
            added_where = f"{where}.names_added"
            base_names = self.resolve(base, f"{where}.base")[0]
            added = _names(fleet["names_added"], added_where)
            _require(fleet, ("live",), where)
            # the live set is checked against the table it will have before a shared list grows
            _bitmap_within(fleet["live"], f"{where}.live", len(base_names) + len(added))
            self._listed += len(added)
            if added and base_names.branched():
                if self._copied + len(base_names) > COPY_FACTOR * self._listed + COPY_ALLOWANCE:
                    raise CompactError(
                        f"{where}.base: snapshot {base} is extended by another already, so this one would "
                        f"copy its {len(base_names)} names, past the {COPY_FACTOR} times the names the "
                        f"trace's snapshots list (plus {COPY_ALLOWANCE}) that its copies may hold")
                self._copied += len(base_names)
            self._latest = base_names.extended(added, added_where)
            return self._latest, fleet["live"]
        else:
            raise CompactError(f"{where}: expected a snapshot object with 'names' or 'base', "
                               f"found {describe(fleet)} with neither")
        self._latest = names
        return names, fleet["live"]


def _names(names: Any, where: str) -> list[str]:
    if not isinstance(names, list):
        raise _wrong(where, "an array of agent names", names)
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise _wrong(f"{where}[{i}]", "an agent name (a string)", name)
    return names


_COMMON_MEMBERS = ("format", "fleet", "candidates", "filters_passed", "failed")
_MEMBERS = {"task.bound": _COMMON_MEMBERS + ("scores", "requirements", "declaration", "rest"),
            "task.rejected": _COMMON_MEMBERS}
_REQUIRED = {"task.bound": ("format", "fleet", "filters_passed", "failed", "scores", "requirements", "declaration"),
             "task.rejected": ("format", "fleet", "filters_passed", "failed")}


class Decoder:
    """Turns compact records back into spec records; keeps the snapshots of one trace."""

    def __init__(self) -> None:
        self._snapshots = Snapshots()

    def forget(self, seq: int) -> None:
        """Drop a snapshot registered by a record that was not written after all."""
        self._snapshots.forget(seq)

    def decode_content(self, seq: int, kind: str, content: Any) -> Any:
        """The spec form of record `seq`'s content. Only task.bound and task.rejected have a compact
        form: any other content, and content without the member, comes back as it is. CompactError,
        naming the seq and the member's path, for a compact member outside the format; a record
        that fails registers no snapshot."""
        _check_arguments(seq, kind)
        if kind not in _PLACEMENT_KINDS or not is_compact(content):
            return content
        member = self._snapshots.read_member(seq, kind, content)
        names = member.names.names     # indexed by the record's checked ids
        failed_pairs = [{"candidate": names[aid], "predicate": p}
                        for p, ids in zip(member.predicates, member.failed) for aid in ids]
        candidate_names = [names[aid] for aid in member.candidates]
        if kind == "task.bound":
            compact = content[KEY]
            replacement: dict[str, Any] = {"scheduling": scheduling_object(
                compact["requirements"], compact["declaration"], candidate_names, member.predicates,
                failed_pairs, member.score_map(), member.rest)}
        else:
            replacement = {"candidates": candidate_names, "filters_failed": failed_pairs}
        out: dict[str, Any] = {}
        if member.derived_reason and "code" not in content:
            out["reason"] = derived_reason(member)
        for key, value in content.items():
            if key == KEY:
                out.update(replacement)
            else:
                out[key] = value
            if key == "code" and member.derived_reason:
                out["reason"] = derived_reason(member)
        return out


def derived_reason(member: "CompactMember") -> str:
    """The reason a compact rejection with `derived_reason` left out: every predicate that removed
    candidates, with their names in id order (the text a3fast's rejections carry, §6)."""
    names = member.names.names     # indexed by the record's checked ids
    return reason_among(len(member.candidates), [
        (predicate, ", ".join([names[aid] for aid in ids]))
        for predicate, ids in zip(member.predicates, member.failed) if ids])


class CompactMember(NamedTuple):
    """The compact member of one placement record, read and checked against the format: what the
    decoder expands into the spec lists, and what the verifier checks on the bitmaps themselves."""

    names: NameTable             # the fleet snapshot's name table: agent id -> name
    candidates: BitMap
    predicates: list[str]        # filters_passed
    failed: list[BitMap]         # per predicate, the candidates that failed it first
    score_ids: BitMap            # task.bound: the scored (eligible) agents; empty for a rejection
    score_columns: list[tuple[str, list[Any]]]   # (component, one value per scored agent)
    rest: dict[str, Any]         # task.bound: the other members of the scheduling object
    derived_reason: bool = False  # task.rejected: the reason is left out, to be derived

    def score_map(self) -> dict[str, dict[str, Any]]:
        """The §6 scores object: name -> {component: value}."""
        names, column_names = self.names.names, [name for name, _ in self.score_columns]
        rows = zip(*(values for _, values in self.score_columns)) if self.score_columns \
            else [()] * len(self.score_ids)
        return {names[aid]: dict(zip(column_names, row)) for aid, row in zip(self.score_ids, rows)}


def _read_member(snapshots: "Snapshots", seq: int, kind: str, content: dict[str, Any]) -> CompactMember:
    at = f"seq {seq}: {_ROOT}"
    compact = content[KEY]
    if not isinstance(compact, dict):
        raise _wrong(at, "an object", compact)
    fmt = compact.get("format")
    if type(fmt) is not int or fmt not in _FORMATS:  # not true, not 1.0; the members may differ by format
        raise CompactError(f"{at}.format: unknown compact format "
                           f"{describe(fmt) if 'format' in compact else 'none'} "
                           f"(this decoder reads formats {FORMAT} and {DERIVED_REASON_FORMAT})")
    members = _MEMBERS[kind]
    if fmt == DERIVED_REASON_FORMAT:
        if kind != "task.rejected":  # the one thing format 2 adds is a rejection's derived reason
            raise CompactError(f"{at}.format: compact format {DERIVED_REASON_FORMAT} is a task.rejected "
                               f"record's (with a derived reason); a {kind} record is format {FORMAT}")
        members = (*members, "derived_reason")
    _only(compact, members, at, f"the compact form of a {kind} record")
    _require(compact, _REQUIRED[kind], at)
    for key in _COMPACTED[kind]:
        if key in content:
            raise CompactError(f"seq {seq}: {json_path('$.content', key)}: a compact {kind} record "
                               f"carries its {key!r} in {KEY!r}, found it beside too")
    derived = "derived_reason" in compact
    if derived:
        if compact["derived_reason"] is not True:
            raise _wrong(f"{at}.derived_reason", "true", compact["derived_reason"])
        if "reason" in content:
            raise CompactError(f"seq {seq}: $.content.reason: a compact rejection with a derived "
                               f"reason carries its reason in {KEY!r}, found it beside too")
    fleet = compact["fleet"]
    names, live = snapshots.resolve(fleet, f"{at}.fleet")
    top = len(names)
    if "candidates" in compact:
        candidates = _bitmap_within(compact["candidates"], f"{at}.candidates", top)
    else:
        candidates = _bitmap(live, f"{at}.fleet.live")  # checked against its names when registered
    predicates = compact["filters_passed"]
    if not isinstance(predicates, list):
        raise _wrong(f"{at}.filters_passed", "an array of predicate strings", predicates)
    for k, predicate in enumerate(predicates):
        if not isinstance(predicate, str):
            raise _wrong(f"{at}.filters_passed[{k}]", "a predicate string", predicate)
    failed = compact["failed"]
    if not isinstance(failed, list) or len(failed) != len(predicates):
        raise _wrong(f"{at}.failed", f"an array of {len(predicates)} bitmaps, one per predicate", failed)
    failed_ids = [_bitmap_within(text, f"{at}.failed[{k}]", top) for k, text in enumerate(failed)]
    score_ids = BitMap()
    columns: list[tuple[str, list[Any]]] = []
    rest: Any = {}
    if kind == "task.bound":
        score_ids, columns = _scores(compact["scores"], top, f"{at}.scores")
        rest = compact.get("rest", {})
        if not isinstance(rest, dict):
            raise _wrong(f"{at}.rest", "an object (the other members of the scheduling object)", rest)
        for key in rest:
            if key in _SCHEDULING_LISTS:
                raise CompactError(f"{_member(f'{at}.rest', key)}: the compact member carries "
                                   f"{key!r} itself; it cannot be in rest too")
    if derived and not candidates:
        raise CompactError(f"{at}.derived_reason: a reason is derived from the candidates that failed, "
                           f"and this rejection has none")
    if isinstance(fleet, dict):
        snapshots.tables[seq] = (names, live)
    return CompactMember(names, candidates, predicates, failed_ids, score_ids, columns, rest, derived)


def _scores(scores: Any, top: int, where: str) -> tuple[BitMap, list[tuple[str, list[Any]]]]:
    if not isinstance(scores, dict):
        raise _wrong(where, "an object {ids, columns}", scores)
    _only(scores, ("ids", "columns"), where, "scores")
    _require(scores, ("ids", "columns"), where)
    ids = _bitmap_within(scores["ids"], f"{where}.ids", top)
    columns = scores["columns"]
    if not isinstance(columns, list):
        raise _wrong(f"{where}.columns", "an array of [name, type, data] columns", columns)
    values = [_column_values(c, len(ids), f"{where}.columns[{k}]") for k, c in enumerate(columns)]
    column_names = [c[0] for c in columns]
    if len(set(column_names)) != len(column_names):
        raise CompactError(f"{where}.columns: the column {_first_repeat(column_names)!r} appears twice")
    return ids, list(zip(column_names, values))


def is_compact(content: Any) -> bool:
    return isinstance(content, dict) and KEY in content


# -- whole traces -------------------------------------------------------------------------------------
def _record(record: Any, index: int) -> Mapping[str, Any]:
    if not isinstance(record, Mapping):
        raise _wrong(f"record {index}", "a record {seq, kind, content}", record)
    _require(record, ("seq", "kind", "content"), f"record {index}")  # type: ignore[arg-type]
    return record


def encode_trace(records: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    """The records with compact content where it is lossless; every other member of a record is
    kept, in its place."""
    encoder = Encoder()
    for index, record in enumerate(records, 1):
        record = _record(record, index)
        yield {**record, "content": encoder.encode(record["seq"], record["kind"], record["content"])}


def decode_trace(records: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    """The records in spec form; every other member of a record is kept, in its place."""
    decoder = Decoder()
    for index, record in enumerate(records, 1):
        record = _record(record, index)
        yield {**record, "content": decoder.decode_content(record["seq"], record["kind"], record["content"])}

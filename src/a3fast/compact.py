"""The compact placement encoding: the whole §6 explanation in a few KB, decoding to exactly the
spec record. The format is specified in docs/compact-format.md; this module is its reference.

A compact record is the spec record with its large lists replaced by one member, `a3fast.compact`:
agent ids instead of names (the name table is a fleet snapshot written once, inside the first record
that needs it, and referenced by seq afterwards), portable Roaring bitmaps (base64) instead of the
`candidates` and `filters_failed` lists, and typed columns instead of the `scores` object.
Snapshots ride inside records rather than as records of their own so that a compact trace keeps
the seq numbers of its spec form, and with them every `recorded_in` reference.
"""
from __future__ import annotations

import base64
import binascii
import sys
from array import array
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import orjson
from pyroaring import BitMap

from .roaring import deserialize_ids as _deserialize, serialize_ids

__all__ = ["FORMAT", "KEY", "serialize_ids", "deserialize_ids", "Encoder", "Decoder", "CompactError",
           "encode_trace", "decode_trace", "is_compact"]

FORMAT = 1
KEY = "a3fast.compact"
_EMPTY = ""


class CompactError(ValueError):
    """A compact record that cannot be decoded (unknown format, missing snapshot, bad bitmap)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise CompactError(f"{what}: expected base64 text")
    try:
        return _strict_b64decode(text)
    except (ValueError, binascii.Error):
        raise CompactError(f"{what}: not base64") from None


def _strict_b64decode(text: str) -> bytes:
    # binascii's strict mode (3.11+) refuses what base64.b64decode(validate=True) refuses, twice as fast
    if sys.version_info >= (3, 11):
        return binascii.a2b_base64(text, strict_mode=True)
    return base64.b64decode(text, validate=True)


def _ids_text(ids) -> str:
    return _EMPTY if len(ids) == 0 else _b64(serialize_ids(ids))


def deserialize_ids(data: bytes) -> BitMap:
    """Any portable Roaring bitmap (with or without runs) -> BitMap; CompactError if it is not one."""
    try:
        return _deserialize(data)
    except ValueError as exc:
        raise CompactError(str(exc)) from None


def _bitmap(text: Any, what: str) -> BitMap:
    return BitMap() if text == _EMPTY else deserialize_ids(_unb64(text, what))


# -- typed score columns ------------------------------------------------------------------------------
def _column(values: list[Any]) -> list[Any]:
    """[type, data]: 'f64' (little-endian doubles, base64) when every value is a float, 'i64' for
    ints, else 'json' (the values as they are). Floats keep every bit, -0.0 and 1e-300 included."""
    if all(type(v) is float for v in values):
        return ["f64", _b64(_f64_bytes(values))]
    if all(type(v) is int and -2**63 <= v < 2**63 for v in values):
        return ["i64", _b64(np.asarray(values, dtype="<i8").tobytes())]
    return ["json", values]


def _column_values(column: Any, n: int) -> list[Any]:
    if not (isinstance(column, list) and len(column) == 3 and isinstance(column[0], str)):
        raise CompactError("scores column: expected [name, type, data]")
    _, kind, data = column
    if kind == "f64":
        values = np.frombuffer(_unb64(data, "scores column"), dtype="<f8").tolist()
    elif kind == "i64":
        values = np.frombuffer(_unb64(data, "scores column"), dtype="<i8").tolist()
    elif kind == "json" and isinstance(data, list):
        values = data
    else:
        raise CompactError(f"scores column: unknown type {kind!r}")
    if len(values) != n:
        raise CompactError(f"scores column {column[0]!r}: {len(values)} values for {n} agents")
    return values


# -- encoding -----------------------------------------------------------------------------------------
class Encoder:
    """Turns the records of one trace into compact form, writing each fleet snapshot once.

    `encode(seq, kind, content)` takes spec JSON content (from any implementation) and returns the
    content to write instead: a record that would not decode to exactly what it was (a foreign
    order of its lists, a shape the format does not cover) comes back unchanged, so a trace may
    mix both forms. `encode_placement` is the fast path for a3fast's own placements.
    """

    def __init__(self) -> None:
        self._names: list[str] = []
        self._ids: dict[str, int] = {}
        self._snapshot_seq: int | None = None
        self._snapshot_names = 0          # names the current snapshot covers
        self._live_text: str | None = None
        self._decoder = Decoder()
        self._index = None                # the engine index encode_placement's ids belong to
        self._generation = None

    # -- from spec JSON --
    def encode(self, seq: int, kind: str, content: Any) -> Any:
        if not isinstance(content, dict):
            return content
        saved = (len(self._names), self._snapshot_seq, self._snapshot_names, self._live_text)
        if kind == "task.bound" and isinstance(content.get("scheduling"), dict) \
                and "candidates" in content["scheduling"]:
            compact = self._bound(seq, content["scheduling"])
        elif kind == "task.rejected" and isinstance(content.get("candidates"), list):
            compact = self._rejected(seq, content)
        else:
            return content
        if compact is not None:
            encoded = _replace(content, compact)
            try:
                if self._decoder.decode_content(seq, kind, encoded) == content:
                    return encoded
            except CompactError:
                pass
        self._rollback(seq, *saved)
        return content

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
        if self._snapshot_seq is None:
            snapshot: dict[str, Any] = {"names": list(self._names)}
        else:
            snapshot = {"base": self._snapshot_seq, "names_added": self._names[self._snapshot_names:]}
        snapshot["live"] = live_text
        self._snapshot_seq, self._snapshot_names, self._live_text = seq, len(self._names), live_text
        return snapshot

    def _lists(self, seq: int, candidates: Any, predicates: Any, failed_pairs: Any) -> dict[str, Any] | None:
        if not (isinstance(candidates, list) and isinstance(predicates, list) and isinstance(failed_pairs, list)):
            return None
        candidate_ids = self._intern(candidates)
        if candidate_ids is None or candidate_ids != sorted(set(candidate_ids)):
            return None
        position = {p: k for k, p in enumerate(predicates) if isinstance(p, str)}
        groups: list[list[int]] = [[] for _ in predicates]
        for pair in failed_pairs:
            if not (isinstance(pair, dict) and set(pair) == {"candidate", "predicate"}):
                return None
            k = position.get(pair["predicate"]) if isinstance(pair["predicate"], str) else None
            aid = self._ids.get(pair["candidate"]) if isinstance(pair["candidate"], str) else None
            if k is None or aid is None:
                return None
            groups[k].append(aid)
        return {"format": FORMAT, "fleet": self._fleet(seq, candidate_ids), "filters_passed": predicates,
                "failed": [_ids_text(sorted(g)) for g in groups]}

    def _bound(self, seq: int, s: dict[str, Any]) -> dict[str, Any] | None:
        compact = self._lists(seq, s.get("candidates"), s.get("filters_passed"), s.get("filters_failed"))
        scores = s.get("scores")
        if compact is None or not isinstance(scores, dict):
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
        compact["requirements"] = s.get("requirements")
        compact["declaration"] = s.get("declaration")
        rest = {k: v for k, v in s.items() if k not in _SCHEDULING_LISTS}
        if rest:
            compact["rest"] = rest
        return compact

    def _rejected(self, seq: int, content: dict[str, Any]) -> dict[str, Any] | None:
        failed = content.get("filters_failed", [])
        if not isinstance(failed, list):
            return None
        predicates = list(dict.fromkeys(p.get("predicate") for p in failed if isinstance(p, dict)))
        return self._lists(seq, content.get("candidates"), predicates, failed)

    # -- from a Placement --
    def encode_placement(self, seq: int, placement) -> list[tuple[str, bytes]]:
        """The trace records of a Placement (starting at `seq`) with compact content, built from
        the engine's id sets without producing the spec lists. Use one Encoder per trace, and
        either this or `encode`, not both."""
        from .records import placement_records

        p = placement
        if p.resumed:
            return list(placement_records(p))
        kinds = ["task.submitted", "task.admitted", "task.bound"] if p.bound else ["task.submitted", "task.rejected"]
        out = []
        for offset, kind in enumerate(kinds):
            if kind == "task.submitted":
                content = orjson.dumps({"requirements": p.submitted.doc})
            elif kind == "task.admitted":
                content = orjson.dumps({"agent": p.declaration.agent.to_dict()})
            else:
                content = self._placement_content(seq + offset, p)
            out.append((kind, content))
        return out

    def _placement_content(self, seq: int, p) -> bytes:
        from .records import reason_text, timings

        expl = p.explanation
        index = p.index
        if index is not self._index or p.generation != self._generation:
            if index is not self._index:
                self._names, self._snapshot_seq, self._snapshot_names, self._live_text = [], None, 0, None
            self._index, self._generation = index, p.generation
            live = expl.candidate_ids()
            top = live[-1] + 1 if live else 0
            self._names.extend(index.name(i) for i in range(len(self._names), top))
            fleet = self._fleet(seq, live)
        else:
            fleet = self._snapshot_seq
        failed = [_b64(expl.failed_roaring(k)) if count else _EMPTY
                  for k, count in enumerate(expl.failed_counts())]
        compact: dict[str, Any] = {"format": FORMAT, "fleet": fleet, "filters_passed": list(p.predicates),
                                   "failed": failed}
        tail: dict[str, Any] = {"route": p.route} if p.route is not None else {}
        tail["timings"] = timings(p)
        if not p.bound:
            return orjson.dumps({"code": "unschedulable", "reason": reason_text(p),
                                 "requirements": p.requirements.doc, KEY: compact, **tail})
        scores = p.scores
        compact["scores"] = {"ids": _b64(expl.eligible_roaring()) if len(scores) else _EMPTY,
                             "columns": _score_columns(p)}
        compact["requirements"] = p.requirements.doc
        compact["declaration"] = p.declaration.doc
        compact["rest"] = tail
        return orjson.dumps({KEY: compact})


def _score_columns(p) -> list[list[Any]]:
    scores = p.scores
    if p.custom_scores:
        entries = scores.entries
        names = list(dict.fromkeys(k for e in entries for k in e))
        if any(list(e) != names for e in entries):
            raise CompactError("custom scores with differing components have no compact form")
        return [[c, *_column([e[c] for e in entries])] for c in names]
    # the default scorer's components are floats by construction: straight to f64 columns
    return [[c, "f64", _b64(_f64_bytes(getattr(scores, c)))] for c in _DEFAULT_COMPONENTS]


_DEFAULT_COMPONENTS = ("total", "affinity", "success_rate", "cost", "substantiated")


def _f64_bytes(values) -> bytes:
    column = array("d", values)
    if sys.byteorder != "little":
        column.byteswap()
    return column.tobytes()


_SCHEDULING_LISTS = ("requirements", "declaration", "candidates", "filters_passed", "filters_failed", "scores")


def _replace(content: dict[str, Any], compact: dict[str, Any]) -> dict[str, Any]:
    """The content with its spec lists (scheduling, or candidates + filters_failed) replaced by
    the compact member, which takes the place of the first of them."""
    out = {}
    for key, value in content.items():
        if key in ("scheduling", "candidates", "filters_failed"):
            out.setdefault(KEY, compact)
        else:
            out[key] = value
    return out


# -- decoding -----------------------------------------------------------------------------------------
class _Snapshots:
    """Fleet snapshots seen so far in a trace: seq -> (name table, live set as base64)."""

    def __init__(self) -> None:
        self.tables: dict[int, tuple[list[str], str]] = {}

    def forget(self, seq: int) -> None:
        self.tables.pop(seq, None)

    def read(self, seq: int, fleet: Any) -> tuple[list[str], str]:
        if isinstance(fleet, int) and not isinstance(fleet, bool):
            if fleet not in self.tables:
                raise CompactError(f"fleet snapshot {fleet} is not earlier in the trace")
            return self.tables[fleet]
        if not isinstance(fleet, dict) or not isinstance(fleet.get("live"), str):
            raise CompactError("fleet: expected a snapshot seq or a snapshot object")
        if "names" in fleet:
            names = fleet["names"]
        else:
            base = self.read(seq, fleet.get("base"))[0]
            names = base + list(fleet.get("names_added") or [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise CompactError("fleet snapshot: expected a list of names")
        _bitmap(fleet["live"], "fleet live set")
        self.tables[seq] = (names, fleet["live"])
        return self.tables[seq]


class Decoder:
    """Turns compact records back into spec records; keeps the snapshots of one trace."""

    def __init__(self) -> None:
        self._snapshots = _Snapshots()

    def forget(self, seq: int) -> None:
        """Drop a snapshot registered by a record that was not written after all."""
        self._snapshots.forget(seq)

    def decode_content(self, seq: int, kind: str, content: Any) -> Any:
        if not is_compact(content):
            return content
        compact = content[KEY]
        if not isinstance(compact, dict) or compact.get("format") != FORMAT:
            raise CompactError(f"unknown compact format {compact.get('format') if isinstance(compact, dict) else compact!r}")
        names, live = self._snapshots.read(seq, compact.get("fleet"))
        candidates = _bitmap(compact.get("candidates", live), "candidates")
        predicates = compact.get("filters_passed")
        failed = compact.get("failed")
        if not isinstance(predicates, list) or not isinstance(failed, list) or len(failed) != len(predicates):
            raise CompactError("expected one failed bitmap per predicate")
        name = _namer(names)
        failed_pairs = [{"candidate": name(aid), "predicate": p}
                        for p, text in zip(predicates, failed) for aid in _bitmap(text, "failed")]
        candidate_names = [name(aid) for aid in candidates]
        out = {}
        for key, value in content.items():
            if key != KEY:
                out[key] = value
                continue
            if kind == "task.bound":
                out["scheduling"] = {"requirements": compact.get("requirements"),
                                     "declaration": compact.get("declaration"),
                                     "candidates": candidate_names, "filters_passed": predicates,
                                     "filters_failed": failed_pairs, "scores": _scores(compact, name),
                                     **(compact.get("rest") or {})}
            else:
                out["candidates"] = candidate_names
                out["filters_failed"] = failed_pairs
        return out


def _namer(names: list[str]):
    def name(aid: int) -> str:
        if aid >= len(names):
            raise CompactError(f"agent id {aid} is not in the fleet snapshot")
        return names[aid]
    return name


def _scores(compact: dict[str, Any], name) -> dict[str, Any]:
    scores = compact.get("scores")
    if not isinstance(scores, dict):
        raise CompactError("scores: expected an object")
    ids = scores.get("ids")
    ids = list(_bitmap(ids, "scores ids")) if isinstance(ids, str) else ids
    if not isinstance(ids, list):
        raise CompactError("scores ids: expected a bitmap or a list")
    columns = scores.get("columns") or []
    values = [_column_values(c, len(ids)) for c in columns]
    return {name(aid): {c[0]: v[j] for c, v in zip(columns, values)} for j, aid in enumerate(ids)}


def is_compact(content: Any) -> bool:
    return isinstance(content, dict) and KEY in content


# -- whole traces -------------------------------------------------------------------------------------
def encode_trace(records: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    encoder = Encoder()
    for record in records:
        yield {**record, "content": encoder.encode(record.get("seq"), record.get("kind"), record.get("content"))}


def decode_trace(records: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    decoder = Decoder()
    for record in records:
        yield {**record, "content": decoder.decode_content(record.get("seq"), record.get("kind"), record.get("content"))}


# -- verifying without decoding (§7 on the bitmaps) -----------------------------------------------------
class _NameIds:
    """A snapshot's name -> id map, built on first use (only the chosen agent's name is looked up)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self._ids: dict[str, int] | None = None

    def id_of(self, name: str) -> int | None:
        if self._ids is None:
            self._ids = {n: i for i, n in enumerate(self.names)}
        return self._ids.get(name)


class CompactFailed:
    """`filters_failed` as one bitmap per predicate: the §7 checks become membership tests."""

    def __init__(self, predicates: list[str], bitmaps: list[BitMap], names: _NameIds):
        self.predicates, self.bitmaps, self.names = predicates, bitmaps, names

    def predicate_of(self, candidate: str) -> str | None:
        aid = self.names.id_of(candidate)
        if aid is not None:
            for predicate, bitmap in zip(self.predicates, self.bitmaps):
                if aid in bitmap:
                    return predicate
        return None

    def cross_check(self, scored: "CompactScored | None", matched) -> tuple[list[str], set[str]]:
        """(names both failed and scored, predicates with failed candidates that are not in P)."""
        overlap: list[str] = []
        if scored is not None:
            for bitmap in self.bitmaps:
                overlap += [self.names.names[aid] for aid in bitmap & scored.ids]
        unmatched = set()
        if matched is not None:
            matched_set = frozenset(matched)
            unmatched = {p for p, b in zip(self.predicates, self.bitmaps) if b and p not in matched_set}
        return overlap, unmatched


class CompactScored:
    """The names in `scores`, as the id bitmap of the score columns."""

    def __init__(self, ids: BitMap, names: _NameIds):
        self.ids, self.names = ids, names

    def __contains__(self, name: object) -> bool:
        aid = self.names.id_of(name) if isinstance(name, str) else None
        return aid is not None and aid in self.ids

    def __len__(self) -> int:
        return len(self.ids)


class CompactReader:
    """Reads compact task.bound records of one trace for the verifier, keeping its snapshots."""

    def __init__(self) -> None:
        self._snapshots = _Snapshots()
        self._names: dict[int, _NameIds] = {}
        self._parsed_docs: dict[tuple[str, bytes], tuple[Any, list[str]]] = {}

    _PARSED_LIMIT = 4096

    def _parsed(self, value: Any, field: str, parse, parse_document) -> tuple[Any, list[str]]:
        """A §3/§4 document parsed once per distinct text: a trace repeats the declarations of the
        agents it chooses and the requirements of its tasks."""
        if not isinstance(value, dict):
            return parse_document(value, field, parse)
        try:
            key = (field, orjson.dumps(value))
        except TypeError:
            return parse_document(value, field, parse)
        hit = self._parsed_docs.get(key)
        if hit is None:
            if len(self._parsed_docs) >= self._PARSED_LIMIT:
                self._parsed_docs.clear()
            hit = self._parsed_docs[key] = parse_document(value, field, parse)
        return hit[0], list(hit[1])

    def note(self, seq: int, content: Mapping[str, Any]) -> None:
        """Register the fleet snapshot a compact record other than a task.bound carries (a
        rejection's: §7 reads only its reason, so its lists are never decoded)."""
        compact = content[KEY]
        if not isinstance(compact, dict) or compact.get("format") != FORMAT:
            raise CompactError("unknown compact format")
        self._snapshots.read(seq, compact.get("fleet"))

    def read(self, seq: int, content: Mapping[str, Any]):
        """A scheduling_record.RecordedPlacement whose lists stay bitmaps. CompactError when the
        compact member cannot be read (the verifier reports it as E_STRUCTURE)."""
        from .schema import parse_declaration, parse_requirements
        from .scheduling_record import (ABSENT, RecordedPlacement, _parse_document, _read_route,
                                        _read_resumed)

        compact = content[KEY]
        if not isinstance(compact, dict) or compact.get("format") != FORMAT:
            raise CompactError("unknown compact format")
        fleet = compact.get("fleet")
        names, live = self._snapshots.read(seq, fleet)
        table_seq = seq if isinstance(fleet, dict) else fleet
        name_ids = self._names.get(table_seq)
        if name_ids is None or name_ids.names is not names:
            if "" in names:  # as in spec form: every name in the lists is an agent name
                raise CompactError("fleet snapshot: expected agent names (non-empty strings), found an empty one")
            name_ids = self._names[table_seq] = _NameIds(names)
        predicates, failed = compact.get("filters_passed"), compact.get("failed")
        if not isinstance(predicates, list) or not all(isinstance(p, str) for p in predicates) \
                or not isinstance(failed, list) or len(failed) != len(predicates):
            raise CompactError("expected predicate strings and one failed bitmap per predicate")
        scores = compact.get("scores")
        if not isinstance(scores, dict) or not isinstance(scores.get("ids"), str):
            raise CompactError("scores: expected an object with an ids bitmap")
        bitmaps = [_bitmap(text, "failed") for text in failed]
        score_ids = _bitmap(scores["ids"], "scores ids")
        top = len(names)
        if any(b and b.max() >= top for b in bitmaps + [score_ids]):
            raise CompactError("an agent id is not in the fleet snapshot")
        if "candidates" in compact:
            _bitmap(compact["candidates"], "candidates")
        record = RecordedPlacement()
        record.resumed = _read_resumed(content, compact)
        for field, parse in (("requirements", parse_requirements), ("declaration", parse_declaration)):
            value, problems = self._parsed(compact.get(field, ABSENT), field, parse, _parse_document)
            setattr(record, field, value)
            record.problems += problems
        record.candidates_ok = True
        record.filters_passed = predicates
        record.failed = CompactFailed(predicates, bitmaps, name_ids)
        record.scored = CompactScored(score_ids, name_ids)
        _read_route((compact.get("rest") or {}).get("route", ABSENT), record)
        return record


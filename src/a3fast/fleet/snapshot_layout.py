"""What a fleet snapshot's header and sections must be, checked before anything is built from them.

A snapshot whose checksum matches can still be wrong: written by another tool, or altered and its
checksum recomputed. So every header field is checked for its exact JSON type (an integer is not a
float equal to one, a mapping is not a list) and its documented bound, and every count the header
states is checked against the length of the section that holds it, before any allocation that
scales with a count: the largest thing a check allocates is proportional to the file's own size.
Then the sections' contents are checked (costs, ids, offsets, outcome counts) in shared code, so
that both engines refuse a file alike. Each refusal is a SnapshotError naming the header field or
the section, what was expected and what was found (docs/snapshot.md, "Bounds").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from ..declaration_codec import CODEC_NAME
from ..errors import SnapshotError, describe
from ..predicates import CAPABILITY
from ..schema import MAX_VERSION
from .scoring import MAX_OUTCOMES, check_total_bound
from .rows import EVALUATED, KEY_OF

__all__ = ["MAX_AGENTS", "MAX_ROWS", "MAX_COUNTER", "SECTIONS", "Layout", "check_header", "check_sections"]

#: Agent ids are u32 in the sections (`live`, `row_ids`), so a fleet holds at most this many ids.
MAX_AGENTS = 2**32 - 1
#: Rows are numbered by the same kind of dense integer.
MAX_ROWS = 2**32 - 1
#: `generation` and `membership`: counters that fit a signed 64-bit integer.
MAX_COUNTER = 2**63 - 1
#: The sections every fleet snapshot holds; `declaration_dictionary` as well when the header names
#: a `declaration_codec`.
SECTIONS = ("names", "costs", "live", "row_offsets", "row_ids", "decl_offsets", "declarations", "outcomes")
#: The header's fields (beside the container's `sections`).
_FIELDS = ("content", "agents", "live", "rows", "weights", "generation", "membership", "field_rows",
           "session_rows", "kinds", "written_by", "declaration_codec")
_PAIR_KINDS = (CAPABILITY, EVALUATED)


@dataclass(frozen=True, slots=True)
class Layout:
    """The header's numbers, checked against each other and against the sections' lengths."""

    agents: int
    live: int
    rows: int
    weights: tuple[float, ...]
    generation: int
    membership: int
    field_rows: dict[str, list]
    session_rows: list
    kinds: list
    codec: str | None


def _bad(where: str, expected: str, found: Any) -> SnapshotError:
    return SnapshotError(f"{where}: expected {expected}, found {describe(found)}")


def _integer(header: dict, field: str, low: int, high: int) -> int:
    value = header.get(field)
    if type(value) is not int or not low <= value <= high:
        raise _bad(f"header.{field}", f"an integer from {low} to {high}", value)
    return value


def _pairs(value: Any, where: str, shape: tuple[type, ...], what: str) -> list:
    """A list of lists of exactly the types `shape` (bool is not int here)."""
    if type(value) is not list:
        raise _bad(where, f"a list of {what}", value)
    for at, entry in enumerate(value):
        if type(entry) is not list or len(entry) != len(shape) or any(type(v) is not t for v, t in zip(entry, shape)):
            raise _bad(f"{where}[{at}]", what, entry)
    return value


def check_header(header: dict, sections: dict) -> Layout:
    """The header's fields, each of its exact type and within its bound, and every count in it
    checked against the length of its section (nothing here allocates more than the header holds)."""
    unknown = sorted(set(header) - set(_FIELDS) - {"section_starts"})
    if unknown:
        raise SnapshotError(f"header.{unknown[0]}: not a field of a fleet snapshot's header")
    content = header.get("content")
    if type(content) is not str or content != "a3fast.fleet":
        raise _bad("header.content", '"a3fast.fleet"', content)
    if type(header.get("written_by")) is not str:
        raise _bad("header.written_by", "a string (the engine that wrote the file)", header.get("written_by"))
    codec = header.get("declaration_codec")
    if "declaration_codec" in header and (type(codec) is not str or codec != CODEC_NAME):
        raise _bad("header.declaration_codec", f'"{CODEC_NAME}"', codec)
    wanted = set(SECTIONS) | ({"declaration_dictionary"} if codec is not None else set())
    for name in SECTIONS:
        if name not in sections:
            raise SnapshotError(f"section {name}: missing (the header's section table does not list it)")
    extra = sorted(set(sections) - wanted)
    if extra:
        raise SnapshotError(f"section {extra[0]}: not a section of a fleet snapshot"
                            + (" without a declaration_codec" if extra[0] == "declaration_dictionary" else ""))
    if codec is not None and "declaration_dictionary" not in sections:
        raise SnapshotError("section declaration_dictionary: missing (the header names a declaration_codec)")

    agents = _integer(header, "agents", 0, MAX_AGENTS)
    for name, width, count in (("costs", 8, agents), ("decl_offsets", 8, agents + 1)):
        if len(sections[name]) != width * count:
            raise SnapshotError(f"section {name}: {len(sections[name])} bytes; header.agents = {agents} "
                                f"makes it {width * count}")
    live = _integer(header, "live", 0, agents)
    if len(sections["live"]) != 4 * live:
        raise SnapshotError(f"section live: {len(sections['live'])} bytes; header.live = {live} makes it {4 * live}")
    rows = _integer(header, "rows", 0, MAX_ROWS)
    if len(sections["row_offsets"]) != 8 * (rows + 1):
        raise SnapshotError(f"section row_offsets: {len(sections['row_offsets'])} bytes; header.rows = "
                            f"{rows} makes it {8 * (rows + 1)}")
    if len(sections["row_ids"]) % 4:
        raise SnapshotError(f"section row_ids: {len(sections['row_ids'])} bytes is not a whole number of u32 ids")
    generation = _integer(header, "generation", 0, MAX_COUNTER)
    membership = _integer(header, "membership", 0, MAX_COUNTER)

    weights = header.get("weights")
    if (type(weights) is not list or len(weights) != 4
            or not all(type(w) is float and np.isfinite(w) for w in weights)):
        raise _bad("header.weights", "a list of 4 finite floats", weights)
    try:   # as `Fleet(weights=...)` holds them: a total they made infinite would be a record's null
        check_total_bound(weights)
    except ValueError:
        raise _bad("header.weights", "4 floats whose magnitudes add up to a finite number", weights) from None

    field_rows = header.get("field_rows")
    if type(field_rows) is not dict:
        raise _bad("header.field_rows", "an object of lists by predicate kind", field_rows)
    named: list[int] = []
    for kind, entries in field_rows.items():
        where = f"header.field_rows.{kind}"
        if kind in _PAIR_KINDS:
            _pairs(entries, where, (str, int, int), "[name, version, row]")
            for at, (_, version, _) in enumerate(entries):
                if not 0 <= version <= MAX_VERSION:
                    raise _bad(f"{where}[{at}][1]", f"a major version from 0 to {MAX_VERSION}", version)
        elif kind in KEY_OF:
            _pairs(entries, where, (str, int), "[value, row]")
        else:
            raise SnapshotError(f"header.field_rows.{kind[:60]}: not a predicate kind "
                                f"({', '.join((*_PAIR_KINDS, *KEY_OF))})")
        if len({tuple(e[:-1]) for e in entries}) != len(entries):
            raise SnapshotError(f"{where}: a value is listed twice")
        named += [e[-1] for e in entries]
    session_rows = _pairs(header.get("session_rows"), "header.session_rows", (str, int), "[session, row]")
    if len({s for s, _ in session_rows}) != len(session_rows):
        raise SnapshotError("header.session_rows: a session is listed twice")
    named += [r for _, r in session_rows]
    # every row named exactly once: the count first, so that no list as long as a stated count is built
    if len(named) != rows or sorted(named) != list(range(rows)):
        raise SnapshotError(f"header.field_rows, header.session_rows: the rows they name are not "
                            f"each of header.rows = {rows} rows once")

    kinds = _pairs(header.get("kinds"), "header.kinds", (str, int), "[kind, number of outcome records]")
    if len({k for k, _ in kinds}) != len(kinds):
        raise SnapshotError("header.kinds: a kind is listed twice")
    for at, (_, count) in enumerate(kinds):
        if not 0 <= count <= agents:
            raise _bad(f"header.kinds[{at}][1]", f"a number of outcome records from 0 to header.agents = {agents}", count)
    records = sum(count for _, count in kinds)
    if len(sections["outcomes"]) != 24 * records:
        raise SnapshotError(f"section outcomes: {len(sections['outcomes'])} bytes; header.kinds makes it "
                            f"{24 * records} ({records} records of 24 bytes)")
    return Layout(agents=agents, live=live, rows=rows, weights=tuple(weights), generation=generation,
                  membership=membership, field_rows=field_rows, session_rows=session_rows, kinds=kinds,
                  codec=codec)


def _ascending_below(ids: np.ndarray, limit: int) -> int:
    """The position of the first id that is not below `limit` or not above the one before; -1."""
    bad = ids >= limit
    bad[1:] |= ids[1:] <= ids[:-1]
    hits = np.flatnonzero(bad)
    return int(hits[0]) if len(hits) else -1


def check_sections(layout: Layout, sections: dict) -> tuple[list[str], dict[str, int], np.ndarray]:
    """The sections' contents, checked against the header: (agent names, name -> id, declaration
    offsets)."""
    try:
        names = orjson.loads(sections["names"])
    except orjson.JSONDecodeError as exc:
        raise SnapshotError(f"section names: not JSON ({exc})") from None
    if type(names) is not list or len(names) != layout.agents:
        raise _bad("section names", f"a JSON array of header.agents = {layout.agents} names", names)
    if names and set(map(type, names)) != {str}:      # one pass in C; the position only on failure
        at = next(k for k, name in enumerate(names) if type(name) is not str)
        raise _bad(f"section names[{at}]", "a string", names[at])
    by_name = dict(zip(names, range(len(names))))
    if len(by_name) != len(names):
        raise SnapshotError("section names: an agent name appears twice")

    costs = np.frombuffer(sections["costs"], dtype="<f8")
    # as at `add`: finite and not negative (nor -0.0); a cost component that is NaN or infinite
    # would make every total it enters win or lose whatever the other components say
    bad = np.flatnonzero(np.signbit(costs) | ~np.isfinite(costs))
    if len(bad):
        at = int(bad[0])
        raise _bad(f"section costs[{at}]", "a finite number of 0 or more", float(costs[at]))

    offsets = np.frombuffer(sections["decl_offsets"], dtype="<u8")
    if offsets[0] != 0 or offsets[-1] != len(sections["declarations"]) or np.any(offsets[1:] < offsets[:-1]):
        raise SnapshotError(f"section decl_offsets: the offsets do not rise from 0 to the "
                            f"{len(sections['declarations'])} bytes of section declarations")
    live = np.frombuffer(sections["live"], dtype="<u4")
    at = _ascending_below(live.astype(np.int64), layout.agents)
    if at >= 0:
        raise SnapshotError(f"section live[{at}]: agent id {int(live[at])} is out of order or not below "
                            f"header.agents = {layout.agents}")
    if not np.array_equal(np.flatnonzero(offsets[1:] != offsets[:-1]), live):
        raise SnapshotError("section live: the live agents are not those with a declaration "
                            "(section decl_offsets)")
    declarations = np.frombuffer(sections["declarations"], dtype=np.uint8)
    first = declarations[offsets[:-1][live].astype(np.int64)] if len(live) else declarations[:0]
    json_ones = first == ord("{")
    if layout.codec is None and not json_ones.all():
        at = int(live[int(np.flatnonzero(~json_ones)[0])])
        raise SnapshotError(f"section declarations: agent {at}'s declaration is not a JSON object and "
                            f"the header names no declaration_codec")

    row_offsets = np.frombuffer(sections["row_offsets"], dtype="<u8")
    total = len(sections["row_ids"]) // 4
    if row_offsets[0] != 0 or row_offsets[-1] != total or np.any(row_offsets[1:] < row_offsets[:-1]):
        raise SnapshotError(f"section row_offsets: the offsets do not rise from 0 to the {total} ids of "
                            f"section row_ids")
    ids = np.frombuffer(sections["row_ids"], dtype="<u4").astype(np.int64)
    bad_ids = ids >= layout.agents
    within = np.ones(total, dtype=bool)      # pairs (j - 1, j) inside one row
    starts = row_offsets[1:-1].astype(np.int64)
    within[starts[(starts > 0) & (starts < total)]] = False
    bad_ids[1:] |= within[1:] & (ids[1:] <= ids[:-1])
    hits = np.flatnonzero(bad_ids)
    if len(hits):
        at = int(hits[0])
        row = int(np.searchsorted(row_offsets, at, side="right")) - 1
        raise SnapshotError(f"section row_ids[{at}]: agent id {int(ids[at])} in row {row} is out of order "
                            f"or not below header.agents = {layout.agents}")

    records = np.frombuffer(sections["outcomes"], dtype="<i8").reshape(-1, 3)
    at = 0
    for k, (kind, count) in enumerate(layout.kinds):
        block = records[at:at + count]
        aid_at = _ascending_below(block[:, 0].copy(), layout.agents)
        if aid_at >= 0 or (len(block) and block[0, 0] < 0):
            j = at + max(aid_at, 0)
            raise SnapshotError(f"section outcomes[{j}]: agent id {int(records[j, 0])} of kind "
                                f"{describe(kind)} is out of order or not below header.agents = {layout.agents}")
        s, a = block[:, 1], block[:, 2]
        wrong = np.flatnonzero((s < 0) | (a < s) | (a > MAX_OUTCOMES))
        if len(wrong):
            j = at + int(wrong[0])
            raise SnapshotError(f"section outcomes[{j}]: {int(records[j, 1])} successes of "
                                f"{int(records[j, 2])} attempts; expected 0 <= successes <= attempts "
                                f"<= {MAX_OUTCOMES}")
        at += count
    return names, by_name, offsets

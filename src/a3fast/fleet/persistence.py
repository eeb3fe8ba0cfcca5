"""Saving a fleet to a snapshot file and filling an empty one from it (docs/snapshot.md).

A snapshot holds everything that decides placements and records: agent ids and join order
(removed names too), declarations as canonical JSON (or packed), the index rows, outcomes, held
sessions and weights. A loaded fleet keeps the declarations in the file's bytes and slices one out
when a record or a caller asks for it.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import orjson
import zstandard

from .. import snapshot
from ..declaration_codec import CODEC_NAME, DeclarationCodec, is_packed
from ..errors import FleetError, SnapshotError, describe
from ..predicates import CAPABILITY, capability
from .rows import EVALUATED, KEY_OF, PredicateRows
from .snapshot_layout import MAX_COUNTER, Layout, check_header, check_sections
from .table import IN_SNAPSHOT, AgentTable

__all__ = ["SNAPSHOT_CONTENT", "write_snapshot", "read_snapshot", "Saved"]

#: What a fleet snapshot's header says it holds (docs/snapshot.md).
SNAPSHOT_CONTENT = "a3fast.fleet"


class Saved:
    """The fleet-wide numbers a snapshot restores beside the table and rows."""

    __slots__ = ("weights", "generation", "membership")

    def __init__(self, weights: tuple[float, ...], generation: int, membership: int):
        self.weights = weights
        self.generation = generation
        self.membership = membership


def write_snapshot(path: str | os.PathLike, table: AgentTable, rows: PredicateRows, engine: str,
                   saved: Saved) -> None:
    """Write the fleet to `path`, whole or not at all; FleetError, writing nothing, for a fleet
    whose counters went past what a snapshot holds (`load` would refuse the file)."""
    for name, value in (("generation", saved.generation), ("membership", saved.membership)):
        if not 0 <= value <= MAX_COUNTER:
            raise FleetError(f"{name}: {value} is past {MAX_COUNTER}, the largest a snapshot holds; this fleet "
                             f"cannot be saved")
    index = rows.index
    n = len(table.entries)
    decls = _saved_declarations(table)
    offsets = np.zeros(n + 1, dtype="<u8")
    np.cumsum([len(d) for d in decls], out=offsets[1:])
    row_offsets, row_ids = index.export_rows()
    kinds = list(rows.kinds)
    outcomes = [index.export_outcomes(rows.kinds[k]) for k in kinds]
    by_kind = {kind: [[*value, row] if kind in (CAPABILITY, EVALUATED) else [value, row]
                      for value, row in values.items()]
               for kind, values in rows.field_rows.items()}
    header = {
        "content": SNAPSHOT_CONTENT, "agents": n, "live": table.count, "rows": index.row_count(),
        "weights": list(saved.weights), "generation": saved.generation, "membership": saved.membership,
        "field_rows": by_kind, "session_rows": [[k, r] for k, r in rows.session_rows.items()],
        "kinds": [[k, len(o) // 24] for k, o in zip(kinds, outcomes)],
        "written_by": engine,
    }
    if table.codec is not None:
        header["declaration_codec"] = CODEC_NAME
    sections = {
        "names": orjson.dumps(list(table.ids)), "costs": index.export_costs(),
        "live": index.export_live(), "row_offsets": row_offsets, "row_ids": row_ids,
        "decl_offsets": offsets.tobytes(), "declarations": b"".join(decls),
        "outcomes": b"".join(outcomes),
    }
    if table.codec is not None:
        sections["declaration_dictionary"] = table.codec.dictionary
    snapshot.write(path, header, sections, version=2 if table.codec is not None else 1)


def _saved_declarations(table: AgentTable) -> list[bytes]:
    """Each agent id's declaration as a snapshot holds it (b"" for a removed agent): canonical
    JSON, or packed by the fleet's codec when it has one."""
    if table.codec is None:
        return [table.declaration_json(aid) if table.entries[aid] is not None else b""
                for aid in range(len(table.entries))]
    kept: list[bytes] = []
    unpacked: list[int] = []
    for aid, entry in enumerate(table.entries):
        if entry is None:
            kept.append(b"")
            continue
        if type(entry) is bytes:
            entry = table.stored_bytes(aid)
        if type(entry) is bytes and is_packed(entry):
            kept.append(entry)
        else:
            unpacked.append(aid)
            kept.append(table.declaration_json(aid))
    for aid, packed in zip(unpacked, table.codec.pack_many([kept[aid] for aid in unpacked])):
        kept[aid] = packed
    return kept


def read_snapshot(path: str | os.PathLike, table: AgentTable, rows: PredicateRows) -> Saved:
    """Fill an empty fleet's table and rows from the snapshot at `path`. SnapshotError names what
    is wrong with a file that is not a snapshot, is of another format version, is cut short or
    damaged, or whose header or sections are malformed or do not agree (snapshot_layout)."""
    data = snapshot.read(path)
    # the checksum runs on another core while the sections are checked and restored; the table and
    # rows filled meanwhile belong to a fleet no caller sees until the checksum has matched
    checksum = snapshot.Checksum(data, str(path))
    try:
        header, sections = snapshot.decode(data, str(path), checksum)
        layout = check_header(header, sections)
        names, ids, offsets = check_sections(layout, sections)
        saved = _restore(data, header, sections, layout, names, ids, offsets, table, rows)
    except SnapshotError as exc:
        checksum.wait()             # a damaged file is named as damaged, whatever else went wrong
        text = str(exc)
        raise SnapshotError(text if text.startswith(f"{path}: ") else f"{path}: {text}") from None
    except (KeyError, TypeError, ValueError, IndexError, zstandard.ZstdError) as exc:
        checksum.wait()
        raise SnapshotError(f"{path}: the snapshot's contents are inconsistent ({exc})") from None
    except BaseException:
        checksum.wait()
        raise
    checksum.wait()
    return saved


def _restore(data: bytes, header: dict, sections: dict, layout: Layout, names: list[str],
             ids: dict[str, int], offsets: np.ndarray, table: AgentTable, rows: PredicateRows) -> Saved:
    """Fill the empty table and rows from a snapshot whose header and sections were checked."""
    n = layout.agents
    lengths = np.diff(offsets)
    field_rows: dict[str, dict] = {kind: {} for kind in rows.field_rows}
    predicate_rows: dict[str, int] = {}
    eval_rows: dict[str, int] = {}
    for kind, entries in layout.field_rows.items():
        for entry in entries:
            row = entry[-1]
            value: Any
            if kind in (CAPABILITY, EVALUATED):
                value = (entry[0], entry[1])
                (eval_rows if kind == EVALUATED else predicate_rows)[capability(*value)] = row
            else:
                value = entry[0]
                predicate_rows[KEY_OF[kind](value)] = row
            field_rows[kind][value] = row
    session_rows = {session: row for session, row in layout.session_rows}

    if layout.codec is not None:
        try:
            codec = DeclarationCodec(sections["declaration_dictionary"])
        except zstandard.ZstdError as exc:
            raise SnapshotError(f"section declaration_dictionary: not a zstd dictionary ({exc})") from None
    index = rows.index
    index.restore(names, sections["costs"], sections["live"], sections["row_offsets"], sections["row_ids"])
    at = 0
    for kind, count in layout.kinds:
        rows.kinds[kind] = kid = index.new_kind()
        index.import_outcomes(kid, sections["outcomes"][at:at + 24 * count])
        at += 24 * count
    row_offsets = np.frombuffer(sections["row_offsets"], dtype="<u8").astype(np.int64)
    row_ids = np.frombuffer(sections["row_ids"], dtype="<u4")
    live_flags = lengths > 0
    for session, row in session_rows.items():
        holders = row_ids[row_offsets[row]:row_offsets[row + 1]]
        if not live_flags[holders].all():
            raise SnapshotError(f"header.session_rows: session {describe(session)}'s row {row} is held "
                                f"by an agent that is not in the fleet")
        for aid in holders.tolist():
            rows.held_sessions.setdefault(aid, set()).add(row)

    if layout.codec is not None:
        # declarations are unpacked when first asked for, and `save` copies packed ones as they are:
        # a dictionary that cannot unpack them is refused now (the first packed live one's read says
        # so: an entry of canonical JSON, which starts with '{', needs no dictionary), not found
        # later, or carried under a fresh checksum into the next snapshot
        live_ids = np.flatnonzero(lengths > 0)
        starts = offsets[:-1][live_ids].astype(np.int64) + header["section_starts"]["declarations"]
        packed_at = np.flatnonzero(np.frombuffer(data, dtype=np.uint8)[starts] != ord("{"))
        if len(packed_at):
            aid = int(live_ids[packed_at[0]])
            start = int(offsets[aid]) + header["section_starts"]["declarations"]
            entry = bytes(data[start:start + int(lengths[aid])])
            if is_packed(entry):
                try:
                    codec.unpack(entry)
                except zstandard.ZstdError as exc:
                    raise SnapshotError(f"section declaration_dictionary: does not unpack agent id {aid}'s "
                                        f"declaration ({exc})") from None
        table.codec = codec
    # declarations stay in the file's bytes, sliced when a record or a caller asks for one
    table.snapshot = data
    table.snapshot_spans = (offsets.astype(np.int64) + header["section_starts"]["declarations"]).tolist()
    stored: list[Any] = [IN_SNAPSHOT] * n
    for aid in np.flatnonzero(lengths == 0).tolist():
        stored[aid] = None
    table.entries = stored
    table.decl_json = [None] * n
    table.member_rows = [None] * n
    table.ids = ids
    rows.rows, rows.eval_rows, rows.field_rows = predicate_rows, eval_rows, field_rows
    rows.session_rows = session_rows
    rows.sessions_restored()
    table.count = layout.live
    return Saved(layout.weights, layout.generation, layout.membership)

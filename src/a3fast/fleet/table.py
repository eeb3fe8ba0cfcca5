"""The agent table: dense agent ids bound to names, and each agent's declaration as whatever form
it is kept in until something asks for it.

Agent ids are given in join order and never reused within a table: a placement holds the index it
was made on, so it names its candidates whatever happens to the fleet afterwards, and
`Fleet.compact` starts a new table (the live agents renumbered in their order) rather than
changing this one. A declaration is kept as its parsed
`Declaration`, or as its canonical JSON (a fleet loaded in bulk parses a declaration only when
something asks for it), or that JSON packed by the fleet's codec, or as a span of the snapshot file
the fleet was loaded from; None once the agent is removed.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import orjson
import zstandard

from ..declaration_codec import DeclarationCodec, is_packed
from ..engines import NATIVE_AVAILABLE, engine_module
from ..errors import FleetError, SchemaError, SnapshotError, describe
from ..schema import Declaration, parse_declaration

__all__ = ["AgentTable", "IN_SNAPSHOT", "check_agent_name"]

#: Marks an agent whose declaration is still in the bytes of the snapshot it was loaded from.
IN_SNAPSHOT = b""
#: The most bytes a packed declaration in a snapshot may state it expands to (docs/snapshot.md).
MAX_DECLARATION_BYTES = 64 << 20
#: Names to live ids in one call (the compiled loop where there is one: both give the same ids).
_live_ids_of = engine_module("native" if NATIVE_AVAILABLE else "pure").live_ids_of


def check_agent_name(name: object, what: str) -> None:
    """TypeError naming `what`, the caller's argument, unless `name` is a string: what every fleet
    says of a value given where a change names an agent (a query answers for it as for an agent it
    does not hold)."""
    if not isinstance(name, str):
        raise TypeError(f"{what}: expected an agent's name (a string), found {describe(name)}")


class AgentTable:
    """Names to ids and ids to declarations (see the module docstring). The fleet package's
    modules read and fill its attributes; everyone else goes through the Fleet."""

    __slots__ = ("ids", "entries", "decl_json", "member_rows", "count", "codec", "snapshot",
                 "snapshot_spans")

    def __init__(self) -> None:
        #: agent name -> id (kept after removal)
        self.ids: dict[str, int] = {}
        #: per agent id: Declaration, canonical JSON (maybe packed), IN_SNAPSHOT, or None if removed
        self.entries: list[Declaration | bytes | None] = []
        #: per agent id: its declaration as JSON once a record needed it
        self.decl_json: list[bytes | None] = []
        #: per agent id: its index rows, or None where they are derived from the declaration on
        #: demand (bulk loads keep no per-agent tuple; only a replace or a removal needs them)
        self.member_rows: list[tuple[int, ...] | None] = []
        #: live agents
        self.count = 0
        #: declarations kept as bytes are canonical JSON, or zstd frames of it once this is set
        self.codec: DeclarationCodec | None = None
        #: the snapshot file this fleet was loaded from, and where each declaration is in it
        self.snapshot: bytes = b""
        self.snapshot_spans: list[int] = []

    def new_id(self, name: str) -> int:
        """Give `name` the next id (not live until its declaration is stored)."""
        aid = len(self.entries)
        self.ids[name] = aid
        self.entries.append(None)
        self.member_rows.append(())
        self.decl_json.append(None)
        return aid

    def is_live(self, aid: int | None) -> bool:
        return aid is not None and self.entries[aid] is not None

    def live_id(self, name: str, what: str = "agent") -> int:
        """The id of a live agent; FleetError naming it if there is none, TypeError naming `what`
        (the caller's argument) for a value that is no name (`check_agent_name`)."""
        check_agent_name(name, what)
        aid = self.ids.get(name)
        if aid is None or self.entries[aid] is None:
            raise FleetError(f"no agent named {name!r} in the fleet")
        return aid

    def names(self) -> list[str]:
        """Live agent names in id order (the order of `candidates` in records)."""
        entries = self.entries
        return [name for name, aid in self.ids.items() if entries[aid] is not None]

    def stored_bytes(self, aid: int) -> bytes:
        """A declaration kept as bytes, as kept (packed or not), taken out of the snapshot if there."""
        entry = self.entries[aid]
        assert type(entry) is bytes, "only a declaration kept as bytes has stored bytes"
        if entry is IN_SNAPSHOT:
            entry = self.snapshot[self.snapshot_spans[aid]:self.snapshot_spans[aid + 1]]
        return entry

    def declaration_json(self, aid: int) -> bytes:
        """An agent's declaration as JSON, encoded the first time a record needs it, since most
        agents of a large fleet are never chosen and encoding on joining would slow every add."""
        entry = self.entries[aid]
        if entry is IN_SNAPSHOT:
            return self._from_snapshot(aid)
        if type(entry) is bytes:
            entry = self.stored_bytes(aid)
            if is_packed(entry):
                assert self.codec is not None, "packed declarations come with their codec"
                return self.codec.unpack(entry)
            return entry
        text = self.decl_json[aid]
        if text is None:
            text = self.decl_json[aid] = orjson.dumps(self.declaration(aid).doc)
        return text

    def declaration_json_of(self, aid: int, declaration: Declaration) -> bytes:
        """`declaration` as JSON, for a placement that chose agent `aid`: the JSON this table keeps
        for the agent (made now if need be) while `aid` is still declared by that very object;
        otherwise (the agent declared again or removed since) encoded for the caller alone, from
        the declaration it chose."""
        entries = self.entries
        if 0 <= aid < len(entries) and entries[aid] is declaration:
            return self.declaration_json(aid)
        return orjson.dumps(declaration.doc)

    def _from_snapshot(self, aid: int) -> bytes:
        """A declaration still in the snapshot's bytes, checked the first time it is asked for and
        kept parsed from then on: a file whose checksum was recomputed after its declarations were
        altered is named (SnapshotError) rather than spliced into a record. The load checked only
        that each live agent has a span; parsing a million declarations there would cost seconds."""
        text = self.stored_bytes(aid)
        where = f"section declarations: agent id {aid}"
        try:
            if is_packed(text):
                assert self.codec is not None, "the load refuses packed declarations without a codec"
                size = zstandard.frame_content_size(text)
                if not 0 <= size <= MAX_DECLARATION_BYTES:
                    raise SnapshotError(f"{where}: a packed declaration stating {size} bytes (at most "
                                        f"{MAX_DECLARATION_BYTES})")
                text = self.codec.unpack(text)
            doc = orjson.loads(text)
            decl = parse_declaration(doc)
        except (zstandard.ZstdError, orjson.JSONDecodeError, SchemaError) as exc:
            raise SnapshotError(f"{where}: not a declaration ({str(exc).splitlines()[0][:200]})") from None
        if self.ids.get(decl.agent.name) != aid:
            raise SnapshotError(f"{where}: the declaration of {decl.agent.name!r}, not of the name "
                                f"section names gives this id")
        if orjson.dumps(doc) != text:
            raise SnapshotError(f"{where}: the declaration is not canonical JSON")
        self.entries[aid] = decl
        self.decl_json[aid] = text
        return text

    def declaration(self, aid: int) -> Declaration:
        """A live agent's Declaration, parsed from its canonical JSON the first time it is asked
        for when the fleet was loaded in bulk."""
        entry = self.entries[aid]
        if isinstance(entry, Declaration):
            return entry
        if entry is None:
            raise FleetError(f"agent id {aid} has been removed from the fleet")
        text = self.declaration_json(aid)
        entry = self.entries[aid]
        if isinstance(entry, Declaration):    # parsed as it left the snapshot
            return entry
        decl = parse_declaration(orjson.loads(text))
        self.decl_json[aid] = text
        self.entries[aid] = decl
        return decl

    def get(self, name: str) -> Declaration | None:
        """The live agent's declaration; None for any other name, or a value that is no name."""
        aid = self.ids.get(name) if isinstance(name, str) else None
        return self.declaration(aid) if aid is not None and self.entries[aid] is not None else None

    def declarations(self) -> Iterator[Declaration]:
        """Live agents' declarations in id order."""
        return (self.declaration(aid) for aid, d in enumerate(self.entries) if d is not None)

    def live_ids_of(self, names: Iterable[str]) -> list[int]:
        """The ids of the named agents that are live (other names are left out), ascending."""
        if isinstance(names, (str, bytes)):
            raise TypeError("candidates: expected an iterable of agent names, found one string")
        return _live_ids_of(self.ids, self.entries, names)

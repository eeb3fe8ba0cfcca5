"""Fleet: the agent table, dense agent ids, updates, and the per-predicate index behind them.

A fleet is one scheduling domain (docs/design.md, reading 3): agents are named by `agent.name`; adding a
declaration for an existing `(namespace, name)` replaces it; a name held by another namespace is an
error. Agent ids are dense and stay bound to their name for the fleet's life, so a placement kept in
compact form can always name its candidates, whatever happens to the fleet afterwards.
"""
from __future__ import annotations

import functools
import gc
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import numpy as np
import orjson

from .engines import ENGINE, engine_module, ingest_module
from . import snapshot
from .declaration_codec import CODEC_NAME, BatchPacker, DeclarationCodec, is_packed
from .errors import A3Error, FleetError, Problem, SchemaError, SnapshotError
from .placement import CustomScores, Placement, Route, check_reason_limit, resumed, resumed_agent
from .predicates import (AGENT_REF, ANTI_AFFINITY, CAPABILITY, CLEARANCE, LATENCY, RESIDENCY, TOOL,
                         capability, clearance, latency_class, residency, tool)
from .schema import Declaration, Requirements, parse_declaration, parse_requirements, task_kind
from .scoring import DEFAULT_WEIGHTS, Scorer, ScoringTask, choose, cost_score

if TYPE_CHECKING:
    # Both engines' Index has the interface of the native one, whose stub (_core.pyi) mypy reads.
    from ._core import Explanation, Index, Scores

__all__ = ["Fleet", "RESOLVED_CACHE_SIZE", "EXPLAINED_CACHE_BUDGET"]

#: `_field_rows` tag of a capability's "substantiates it" row (beside the predicate kinds).
EVALUATED = "evaluated"
#: The predicate string of a declared value, per kind (capabilities take a name and a version).
_KEY_OF = {CLEARANCE: clearance, TOOL: tool, RESIDENCY: residency, LATENCY: latency_class}
_AGENT_REF = AGENT_REF + ":"
_ANTI = ANTI_AFFINITY + ":"
_CAPABILITY = CAPABILITY + ":"
#: The kinds of value the compiled reader asks rows for, by its codes (a3fast._ingest).
_INGEST_KINDS = (CAPABILITY, CLEARANCE, TOOL, RESIDENCY, LATENCY, EVALUATED)

#: Requirements resolved to engine arguments, kept per prepared object and per predicate set (rows
#: and ids are append-only, so a resolution stays valid until the fleet interns something new);
#: bounded so that one-off requirements cannot pile up.
RESOLVED_CACHE_SIZE = 1024
#: How many agent-sized explanations the repeated-task cache holds: 4,194 tasks at 1,000 agents,
#: 41 at 100,000 (an explanation holds P + 1 sets as large as the fleet).
EXPLAINED_CACHE_BUDGET = 1 << 22
#: Marks an agent whose declaration is still in the bytes of the snapshot it was loaded from.
_IN_SNAPSHOT = b""
#: What a fleet snapshot's header says it holds (docs/snapshot.md).
SNAPSHOT_CONTENT = "a3fast.fleet"


#: How much of a JSON Lines file is read at a time (whole lines; a longer line is read whole).
JSONL_CHUNK = 1 << 24


def _chunks_of(source: str | os.PathLike | bytes) -> Iterator[bytes]:
    """JSON Lines bytes in chunks of whole lines: the bytes themselves, or a file read a chunk at a
    time (the whole file is never held)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        yield bytes(source)
        return
    with open(source, "rb") as fh:
        rest = b""
        while block := fh.read(JSONL_CHUNK):
            cut = block.rfind(b"\n")
            if cut < 0:
                rest += block
                continue
            yield rest + block[:cut + 1]
            rest = block[cut + 1:]
        if rest:
            yield rest


def _size_of(source: str | os.PathLike | bytes) -> int | None:
    """How many bytes a JSON Lines source holds, if that is known before reading it."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return len(source)
    try:
        return os.stat(source).st_size if os.path.isfile(source) else None
    except OSError:
        return None


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk load. Parsing and interning a batch makes
    many long-lived, acyclic objects, and every full collection they trigger would rescan the
    whole growing heap for cycles that cannot be there."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _locked(method: _Method) -> _Method:
    """Run a method under the fleet's lock: an update waits for a `place_many` batch under way
    (whose threads read the index without the GIL), and a batch for an update."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return run  # type: ignore[return-value]


class Fleet:
    """Agents that tasks can be placed on. `engine` is "native", "pure" or None (a3fast.ENGINE)."""

    def __init__(self, engine: str | None = None, *, scorer: Scorer | None = None,
                 weights: tuple[float, float, float, float] = DEFAULT_WEIGHTS):
        self.engine = ENGINE if engine is None else engine
        self._engine = engine_module(engine)
        self._index: Index = self._engine.Index()
        self.scorer = scorer
        self.weights: tuple[float, ...] = tuple(float(w) for w in weights)
        #: bumped by every change that can alter a placement's result
        self.generation = 0
        #: bumped by every change of who is in the fleet or what they declare (not by sessions or
        #: outcomes, which only scores read): the filter and explanation cache is valid within one
        self.membership = 0
        self._explained: dict[tuple[str, ...], tuple] = {}  # predicates -> (membership, explanation, eval rows)
        self._rows: dict[str, int] = {}          # predicate string -> row
        self._eval_rows: dict[str, int] = {}     # capability predicate -> row of agents that evaluate it
        self._session_rows: dict[str, int] = {}  # session id -> row of agents holding it
        self._kinds: dict[str, int] = {}         # task kind -> outcome column
        self._ids: dict[str, int] = {}           # agent name -> id (kept after removal)
        # per agent id: its Declaration, or its canonical JSON not parsed yet (a fleet loaded in
        # bulk parses a declaration only when something asks for it) or that JSON packed by
        # `_codec`, or _IN_SNAPSHOT (those bytes are `_snapshot[_snapshot_spans[aid]:
        # _snapshot_spans[aid + 1]]`), or None once removed
        self._agents: list[Declaration | bytes | None] = []
        self._snapshot: bytes = b""              # the snapshot file this fleet was loaded from
        # declarations kept as bytes are canonical JSON, or zstd frames of it once this is set
        # (a3fast.declaration_codec; bulk loads of many agents set it)
        self._codec: DeclarationCodec | None = None
        self._snapshot_spans: list[int] = []
        # per agent id: its index rows, or None where they are derived from the declaration on
        # demand (bulk loads keep no per-agent tuple; only a replace or a removal needs them)
        self._member_rows: list[tuple[int, ...] | None] = []
        self._held_sessions: dict[int, set[int]] = {}   # agent id -> session rows, holders only
        self._decl_json: list[bytes | None] = [] # each declaration as JSON once a record needs it
        # prepared requirements (by id) and predicate sets -> engine arguments (placement)
        self._resolved: dict[int | tuple[str, ...], tuple] = {}
        # predicate kind -> declared value ((name, version) for capabilities) -> row
        self._field_rows: dict[str, dict] = {kind: {} for kind in (*_KEY_OF, CAPABILITY, EVALUATED)}
        self._count = 0
        self._lock = threading.RLock()

    # -- membership -------------------------------------------------------------------------------
    @_locked
    def add(self, declaration: Mapping[str, Any] | Declaration) -> Declaration:
        """Add an agent, or replace the one with the same `(namespace, name)`. Returns the parsed
        declaration; raises SchemaError for an invalid one and FleetError for a name conflict."""
        decl = parse_declaration(declaration)
        name = decl.agent.name
        aid = self._ids.get(name)
        if aid is None:
            aid = len(self._agents)
            self._ids[name] = aid
            self._agents.append(None)
            self._member_rows.append(())
            self._decl_json.append(None)
        current = self._declaration(aid) if self._agents[aid] is not None else None
        if current is not None:
            if current.agent.namespace != decl.agent.namespace:
                raise FleetError(
                    f"agent name {name!r} is already used in namespace {current.agent.namespace!r}; "
                    f"a fleet is one scheduling domain and names must be unique in it "
                    f"(cannot add it from namespace {decl.agent.namespace!r})")
            self._index.drop(aid, self._rows_of(aid))
        else:
            self._count += 1
        rows = self._rows_for(decl)
        # A replaced agent keeps the sessions it holds: drop() above left its session rows alone.
        self._index.put(aid, name, rows, cost_score(decl))
        self._agents[aid] = decl
        self._decl_json[aid] = None                # encoded when a record first needs it
        self._member_rows[aid] = rows
        self.generation += 1
        self.membership += 1
        return decl

    @_locked
    def extend(self, declarations: Iterable[Mapping[str, Any] | Declaration]) -> None:
        """Add many agents; new names are interned in one batch (much faster for a large fleet).
        All declarations are parsed before any is added, so an invalid one changes nothing."""
        with _collector_paused():
            parsed = [parse_declaration(d) for d in declarations]
            batch: dict[str, Declaration] = {}
            for decl in parsed:
                name = decl.agent.name
                if name in self._ids or name in batch:
                    self._add_batch(batch)
                    batch = {}
                    self.add(decl)
                else:
                    batch[name] = decl
            self._add_batch(batch)

    def _add_batch(self, batch: dict[str, Declaration]) -> None:
        if not batch:
            return
        first = len(self._agents)
        aids, names, all_rows, costs = [], [], [], []
        for offset, (name, decl) in enumerate(batch.items()):
            aid = first + offset
            rows = self._rows_for(decl)
            self._ids[name] = aid
            self._agents.append(decl)
            self._member_rows.append(rows)
            self._decl_json.append(None)
            aids.append(aid)
            names.append(name)
            all_rows.append(rows)
            costs.append(cost_score(decl))
        self._index.put_many(aids, names, all_rows, costs)
        self._count += len(batch)
        self.generation += 1
        self.membership += 1

    # -- JSON Lines ingest ---------------------------------------------------------------------------
    @classmethod
    def load_jsonl(cls, source: str | os.PathLike | bytes, engine: str | None = None, *,
                   on_error: str = "refuse", pack: bool | None = None, **options: Any) -> "Fleet":
        """A fleet from JSON Lines of §3 declarations (a path, or the bytes themselves); see
        `extend_jsonl`. `options` go to the Fleet (scorer, weights)."""
        fleet = cls(engine, **options)
        fleet.extend_jsonl(source, on_error=on_error, pack=pack)
        return fleet

    @_locked
    def extend_jsonl(self, source: str | os.PathLike | bytes, *, on_error: str = "refuse",
                     pack: bool | None = None) -> list[Problem]:
        """Add (or replace) the agents of JSON Lines declarations, in line order, in bulk.

        Each line is validated as `parse_declaration` does (the same problems, under `line N:
        $...`) and kept as its rows, cost and canonical JSON — no Declaration stays alive — then
        new rows and agents are interned in one batch per run of new names. On the native engine
        the compiled reader (`a3fast._ingest`) reads the lines it can vouch for in one pass over
        the bytes and hands every other one to orjson and `parse_declaration`, which read every
        line on the pure engine. A name held by another namespace is a problem of its line. With
        `on_error="refuse"` any problem raises SchemaError listing every one and nothing is added;
        with "skip" the bad lines are left out and their problems returned. Blank lines are
        ignored.

        `pack`: keep the declarations compressed with a dictionary trained on the fleet's own
        (a3fast.declaration_codec) — True, False, or None (the default) for a source of
        `PACK_FROM_BYTES` (256 MiB, about 240,000 declarations of the standard workload) or more. Placements and records are the same either way; a packed declaration is
        expanded when a record or a caller needs it. A fleet that packs keeps packing.
        """
        if on_error not in ("refuse", "skip"):
            raise ValueError(f"on_error: expected 'refuse' or 'skip', found {on_error!r}")
        source_name = None if isinstance(source, (bytes, bytearray, memoryview)) else os.fspath(source)
        reader = ingest_module(self.engine)
        batch = reader.Batch()
        problems: list[Problem] = []
        pending: list[tuple[str, Any, int]] = []             # rows to intern: (kind, value, row)
        pending_rows: dict[str, dict] = {kind: {} for kind in self._field_rows}
        first_row = self._index.row_count()

        def new_row(kind: str, value: Any) -> int:
            row = pending_rows[kind].get(value)
            if row is None:
                row = pending_rows[kind][value] = first_row + len(pending)
                pending.append((kind, value, row))
            return row

        def intern(code: int, value: Any) -> int:  # the compiled reader's row for a value
            kind = _INGEST_KINDS[code]
            row = self._field_rows[kind].get(value)
            return row if row is not None else new_row(kind, value)

        namespaces: dict[str, str] = {}                      # names of this batch -> namespace
        vocab = reader.Vocabulary()                          # the compiled reader's rows by value

        def read_carefully(line: bytes, lineno: int) -> None:
            if not line.strip():
                return
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                problems.append(Problem(f"line {lineno}: $", "valid JSON", str(exc)))
                return
            try:
                decl = parse_declaration(doc)
            except SchemaError as exc:
                problems.extend(Problem(f"line {lineno}: {p.path}", p.expected, p.found) for p in exc.problems)
                return
            name, namespace = decl.agent.name, decl.agent.namespace
            held = namespaces.get(name)
            if held is None and name in self._ids and self._agents[self._ids[name]] is not None:
                held = self._declaration(self._ids[name]).agent.namespace
            if held is not None and held != namespace:
                problems.append(Problem(f"line {lineno}: $.agent.namespace",
                                        f"{held!r}, the namespace that holds the name {name!r} "
                                        f"in this fleet (one scheduling domain)", repr(namespace)))
                return
            namespaces[name] = namespace
            canonical = orjson.dumps(doc)
            # keep an exact-size copy: orjson's result carries several times its length in spare
            # capacity, which a million kept declarations would multiply into gigabytes
            text = line.rstrip(b"\r\n")
            if text != canonical:
                text = bytes(memoryview(canonical))
            batch.append(name, self._rows_for(decl, new_row), cost_score(decl), text)

        lineno = 1
        with _collector_paused(), BatchPacker(self._codec, pack, _size_of(source)) as packer:
            for chunk in _chunks_of(source):
                pos, end = 0, len(chunk)
                while pos < end:
                    pos, lineno = reader.scan(chunk, pos, lineno, batch, vocab, intern, self._ids, namespaces)
                    if pos >= end:
                        break
                    eol = chunk.find(b"\n", pos)
                    eol = end if eol < 0 else eol
                    read_carefully(chunk[pos:eol], lineno)
                    pos, lineno = eol + 1, lineno + 1
                packer.after_chunk(batch.texts)
            packer.finish(batch.texts)
        if problems and on_error == "refuse":
            raise SchemaError(problems, source_name)
        self._codec = packer.codec
        if len(batch):
            self._intern_pending(pending)
            self._put_batch(batch)
        return problems

    def _intern_pending(self, pending: list[tuple[str, Any, int]]) -> None:
        """Create the rows `extend_jsonl` numbered ahead, in the order it numbered them."""
        for kind, value, row in pending:
            made = self._index.add_row()
            assert made == row, "rows are numbered in creation order"
            if kind == EVALUATED:
                self._eval_rows[capability(*value)] = row
            else:
                self._rows[capability(*value) if kind == CAPABILITY else _KEY_OF[kind](value)] = row
            self._field_rows[kind][value] = row

    def _put_batch(self, batch: Any) -> None:
        """Apply a checked JSON Lines batch in line order: runs of new names in one engine call
        each, a known name (or one seen earlier in the batch) as a replace."""
        ids, agents, index = self._ids, self._agents, self._index
        names, texts = batch.names, batch.texts
        costs = batch.columns()[2]
        run_start = 0
        run_names: set[str] = set()
        for j, name in enumerate(names):
            if name in ids or name in run_names:
                self._put_run(batch, run_start, j)
                run_start, run_names = j + 1, set()
                aid = ids[name]
                if agents[aid] is not None:
                    index.drop(aid, self._rows_of(aid))
                else:
                    self._count += 1
                index.put(aid, name, batch.rows_of(j), float(costs[j]))
                agents[aid] = texts[j]
                self._decl_json[aid] = None
                self._member_rows[aid] = None
            else:
                run_names.add(name)
        self._put_run(batch, run_start, len(names))
        self.generation += 1
        self.membership += 1

    def _put_run(self, batch: Any, lo: int, hi: int) -> None:
        """Agents `lo:hi` of a batch, all new names, in one engine call."""
        if lo >= hi:
            return
        rows, offsets, costs = batch.columns()
        names = batch.names[lo:hi]
        first = len(self._agents)
        self._index.put_flat(names, rows, offsets[lo:hi + 1], costs[lo:hi])
        self._ids.update(zip(names, range(first, first + len(names))))
        self._agents.extend(batch.texts[lo:hi])
        self._decl_json.extend([None] * len(names))
        self._member_rows.extend([None] * len(names))
        self._count += len(names)

    @_locked
    def remove(self, name: str) -> Declaration:
        """Remove an agent by name; its held sessions go with it. FleetError if it is not here."""
        aid = self._ids.get(name)
        if aid is None or self._agents[aid] is None:
            raise FleetError(f"no agent named {name!r} in the fleet")
        decl = self._declaration(aid)
        self._index.drop(aid, self._rows_of(aid) + tuple(self._held_sessions.pop(aid, ())))
        self._agents[aid] = None
        self._decl_json[aid] = None
        self._member_rows[aid] = ()
        self._count -= 1
        self.generation += 1
        self.membership += 1
        return decl

    def __len__(self) -> int:
        return self._count

    def __contains__(self, name: object) -> bool:
        aid = self._ids.get(name)  # type: ignore[call-overload]  # any object may be asked about; a non-str is just absent
        return aid is not None and self._agents[aid] is not None

    def __iter__(self) -> Iterator[Declaration]:
        return (self._declaration(aid) for aid, d in enumerate(self._agents) if d is not None)

    def get(self, name: str) -> Declaration | None:
        aid = self._ids.get(name)
        return self._declaration(aid) if aid is not None and self._agents[aid] is not None else None

    def _repr_html_(self) -> str:
        """How many agents, and the predicates most of them satisfy, as a notebook shows it."""
        from .report import fleet_html

        return fleet_html(self)

    def names(self) -> list[str]:
        """Live agent names in id order (the order of `candidates` in records)."""
        return [name for name, aid in self._ids.items() if self._agents[aid] is not None]

    # -- snapshots (docs/snapshot.md) -------------------------------------------------------------
    @_locked
    def save(self, path: str | os.PathLike) -> None:
        """Write everything that decides placements and records to `path`, whole or not at all:
        agent ids and join order (removed names too), declarations as canonical JSON, the index
        rows, outcomes, held sessions and weights. A custom `scorer` is code and is not saved:
        pass it again to `Fleet.load`."""
        n = len(self._agents)
        decls = self._saved_declarations()
        offsets = np.zeros(n + 1, dtype="<u8")
        np.cumsum([len(d) for d in decls], out=offsets[1:])
        row_offsets, row_ids = self._index.export_rows()
        kinds = list(self._kinds)
        outcomes = [self._index.export_outcomes(self._kinds[k]) for k in kinds]
        by_kind = {kind: [[*value, row] if kind in (CAPABILITY, EVALUATED) else [value, row]
                          for value, row in rows.items()]
                   for kind, rows in self._field_rows.items()}
        header = {
            "content": SNAPSHOT_CONTENT, "agents": n, "live": self._count, "rows": self._index.row_count(),
            "weights": list(self.weights), "generation": self.generation, "membership": self.membership,
            "field_rows": by_kind, "session_rows": [[k, r] for k, r in self._session_rows.items()],
            "kinds": [[k, len(o) // 24] for k, o in zip(kinds, outcomes)],
            "written_by": self.engine,
        }
        if self._codec is not None:
            header["declaration_codec"] = CODEC_NAME
        sections = {
            "names": orjson.dumps(list(self._ids)), "costs": self._index.export_costs(),
            "live": self._index.export_live(), "row_offsets": row_offsets, "row_ids": row_ids,
            "decl_offsets": offsets.tobytes(), "declarations": b"".join(decls),
            "outcomes": b"".join(outcomes),
        }
        if self._codec is not None:
            sections["declaration_dictionary"] = self._codec.dictionary
        snapshot.write(path, header, sections, version=2 if self._codec is not None else 1)

    def _saved_declarations(self) -> list[bytes]:
        """Each agent id's declaration as a snapshot holds it (b"" for a removed agent): canonical
        JSON, or packed by the fleet's codec when it has one."""
        if self._codec is None:
            return [self._declaration_json(aid) if self._agents[aid] is not None else b""
                    for aid in range(len(self._agents))]
        kept: list[bytes] = []
        unpacked: list[int] = []
        for aid, entry in enumerate(self._agents):
            if entry is None:
                kept.append(b"")
                continue
            if entry is _IN_SNAPSHOT:
                entry = self._snapshot[self._snapshot_spans[aid]:self._snapshot_spans[aid + 1]]
            if type(entry) is bytes and is_packed(entry):
                kept.append(entry)
            else:
                unpacked.append(aid)
                kept.append(self._declaration_json(aid))
        for aid, packed in zip(unpacked, self._codec.pack_many([kept[aid] for aid in unpacked])):
            kept[aid] = packed
        return kept

    @classmethod
    def load(cls, path: str | os.PathLike, engine: str | None = None, *,
             scorer: Scorer | None = None) -> "Fleet":
        """A fleet from a snapshot `save` wrote (by either engine): placements on it are exactly
        those on the saved fleet. SnapshotError names what is wrong with a file that is not a
        snapshot, is of another format version, is cut short or damaged."""
        data = snapshot.read(path)
        header, sections = snapshot.decode(data, str(path))
        fleet = cls(engine, scorer=scorer)
        try:
            fleet._restore(data, header, sections)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            if isinstance(exc, SnapshotError):
                raise
            raise SnapshotError(f"{path}: the snapshot's contents are inconsistent ({exc})") from None
        return fleet

    def _restore(self, data: bytes, header: dict, sections: dict) -> None:
        """Fill this empty fleet from a decoded snapshot, checking that its parts agree."""
        if header.get("content") != SNAPSHOT_CONTENT:
            raise SnapshotError(f"the snapshot holds {header.get('content')!r}, not {SNAPSHOT_CONTENT!r}")
        names = orjson.loads(sections["names"])
        n = header["agents"]
        if type(names) is not list or len(names) != n:
            raise ValueError(f"{n} agents but {len(names) if type(names) is list else 'no list of'} names")
        ids = dict(zip(names, range(n)))
        if len(ids) != n:
            raise ValueError("an agent name appears twice")
        offsets = np.frombuffer(sections["decl_offsets"], dtype="<u8")
        if (len(offsets) != n + 1 or offsets[0] != 0 or offsets[-1] != len(sections["declarations"])
                or np.any(np.diff(offsets.astype(np.int64)) < 0)):
            raise ValueError("declaration offsets do not cover the declarations")
        live = np.frombuffer(sections["live"], dtype="<u4")
        lengths = np.diff(offsets)
        if not np.array_equal(np.flatnonzero(lengths), live):
            raise ValueError("the live agents are not those with a declaration")
        if len(live) != header["live"]:
            raise ValueError(f"{len(live)} live agents, the header says {header['live']}")
        weights = header["weights"]
        if len(weights) != 4 or not all(type(w) in (int, float) for w in weights):
            raise ValueError("weights: expected 4 numbers")

        field_rows: dict[str, dict] = {kind: {} for kind in self._field_rows}
        rows: dict[str, int] = {}
        eval_rows: dict[str, int] = {}
        used: list[int] = []
        for kind, entries in header["field_rows"].items():
            for entry in entries:
                row = entry[-1]
                if kind in (CAPABILITY, EVALUATED):
                    value = (entry[0], entry[1])
                    key = capability(*value)
                    (eval_rows if kind == EVALUATED else rows)[key] = row
                else:
                    value = entry[0]
                    rows[_KEY_OF[kind](value)] = row
                field_rows[kind][value] = row
                used.append(row)
        session_rows = {session: row for session, row in header["session_rows"]}
        used += session_rows.values()
        n_rows = header["rows"]
        if sorted(used) != list(range(n_rows)):
            raise ValueError("the predicate and session rows do not name each row once")

        self._index.restore(names, sections["costs"], sections["live"], sections["row_offsets"],
                            sections["row_ids"])
        at = 0
        for kind, count in header["kinds"]:
            self._kinds[kind] = kid = self._index.new_kind()
            self._index.import_outcomes(kid, sections["outcomes"][at:at + 24 * count])
            at += 24 * count
        if at != len(sections["outcomes"]):
            raise ValueError("outcome records left over")
        row_offsets = np.frombuffer(sections["row_offsets"], dtype="<u8").astype(np.int64)
        row_ids = np.frombuffer(sections["row_ids"], dtype="<u4")
        live_flags = lengths > 0
        for row in session_rows.values():
            holders = row_ids[row_offsets[row]:row_offsets[row + 1]]
            if not live_flags[holders].all():
                raise ValueError(f"session row {row} is held by an agent that is not in the fleet")
            for aid in holders.tolist():
                self._held_sessions.setdefault(aid, set()).add(row)

        codec = header.get("declaration_codec")
        if codec is not None:
            if codec != CODEC_NAME:
                raise ValueError(f"declarations packed by {codec!r}; this a3fast unpacks {CODEC_NAME!r}")
            self._codec = DeclarationCodec(sections["declaration_dictionary"])
        # declarations stay in the file's bytes, sliced when a record or a caller asks for one
        self._snapshot = data
        self._snapshot_spans = (offsets.astype(np.int64) + header["section_starts"]["declarations"]).tolist()
        self._agents = [_IN_SNAPSHOT] * n
        for aid in np.flatnonzero(lengths == 0).tolist():
            self._agents[aid] = None
        self._decl_json = [None] * n
        self._member_rows = [None] * n
        self._ids = ids
        self._rows, self._eval_rows, self._field_rows = rows, eval_rows, field_rows
        self._session_rows = session_rows
        self._count = len(live)
        self.weights = tuple(float(w) for w in weights)
        self.generation = int(header["generation"])
        self.membership = int(header["membership"])

    # -- history the scorer reads -----------------------------------------------------------------
    @_locked
    def record_outcome(self, agent: str, kind: str | Requirements | Mapping[str, Any], success: bool) -> None:
        """Learn from a finished task: `kind` is a task kind or the task's requirements."""
        aid = self._live_id(agent)
        if not isinstance(kind, str):
            kind = task_kind(parse_requirements(kind))
        self._index.record_outcome(self._kind(kind), aid, bool(success))
        self.generation += 1

    @_locked
    def record_outcomes(self, agent: str, kind: str, successes: int, attempts: int) -> None:
        """Learn `attempts` finished tasks of one kind at once, `successes` of them successful: the
        same as that many `record_outcome` calls, in one step (restoring saved counts)."""
        if not 0 <= successes <= attempts:
            raise ValueError(f"successes ({successes}) must be between 0 and attempts ({attempts})")
        aid = self._live_id(agent)
        self._index.add_outcomes(self._kind(kind), aid, successes, attempts)
        self.generation += 1

    def outcomes(self, agent: str, kind: str) -> tuple[int, int]:
        """(successes, attempts) recorded for an agent and a task kind."""
        aid = self._ids.get(agent)
        kid = self._kinds.get(kind, -1)
        return self._index.outcome(kid, aid) if aid is not None and kid >= 0 else (0, 0)

    @_locked
    def hold_session(self, agent: str, session: str) -> None:
        """Mark an agent as holding a session's memory (affinity for tasks that continue it)."""
        aid = self._live_id(agent)
        row = self._session_row(session)
        self._held_sessions.setdefault(aid, set()).add(row)
        self._index.set_bit(row, aid)
        self.generation += 1

    @_locked
    def release_session(self, agent: str, session: str) -> None:
        aid = self._live_id(agent)
        row = self._session_rows.get(session)
        held = self._held_sessions.get(aid)
        if row is not None and held is not None and row in held:
            held.discard(row)
            if not held:
                del self._held_sessions[aid]
            self._index.clear_bit(row, aid)
            self.generation += 1

    def holds_session(self, agent: str, session: str) -> bool:
        aid = self._ids.get(agent)
        row = self._session_rows.get(session)
        return aid is not None and row is not None and row in self._held_sessions.get(aid, ())

    # -- placing ----------------------------------------------------------------------------------
    @_locked
    def place(self, requirements: Mapping[str, Any] | Requirements, session: str | None = None,
              route: Route | None = None, *, scorer: Scorer | None = None, kind: str | None = None,
              remember_session: bool = True, reason_limit: int | None = None,
              candidates: Iterable[str] | None = None) -> Placement:
        """Place one task (§5, §6): gather, filter, explain, score, choose. Returns a Placement.

        `session` (or the requirements' `session`) is used for affinity only; a bound placement
        makes the chosen agent hold it unless `remember_session` is false. `route` is a Route whose
        additions are matched and recorded. A rejection's reason names every candidate that failed
        each predicate (§6); `reason_limit=N` names at most N per predicate and counts the rest, a
        departure from §6 for callers that keep reasons short (filters_failed still lists every
        one). `candidates`, when given, restricts the placement to those agents: names not in the
        fleet are ignored (the caller reports them), and the record's candidates, filters_failed
        and scores are of those agents only, in join order. Raises SchemaError for invalid
        requirements, ValueError for a bad reason_limit.
        """
        placement = self._place(requirements, session, route, scorer=scorer, kind=kind,
                                reason_limit=reason_limit, candidates=candidates)
        session = placement.session
        decl = placement.declaration if placement.bound else None
        if (decl is not None and session is not None and remember_session
                and not self.holds_session(decl.agent.name, session)):
            self.hold_session(decl.agent.name, session)
        return placement

    def _place(self, requirements: Mapping[str, Any] | Requirements, session: str | None,
               route: Route | None, *, scorer: Scorer | None, kind: str | None,
               reason_limit: int | None, candidates: Iterable[str] | None = None) -> Placement:
        """Gather, filter, explain, score, choose: a Placement, holding no session."""
        started = time.perf_counter_ns()
        check_reason_limit(reason_limit)
        submitted = parse_requirements(requirements)
        matched = route.apply(submitted) if route is not None else submitted
        predicates = matched.predicates
        session = session if session is not None else matched.session
        scorer = scorer or self.scorer
        needs_kind = kind is None and bool(self._kinds or scorer)

        # gather: the filter and explanation of a task seen before against the same membership
        # depend only on its predicates and who is in the fleet, so they are reused; otherwise
        # resolve the predicates to rows and agent ids, then filter + explain
        within = None if candidates is None else self._candidate_ids(candidates)
        # a restricted explanation is not the task's: it is neither reused nor kept for reuse
        cached = self._explained.get(predicates) if within is None else None
        if cached is not None and cached[0] == self.membership:
            expl, eval_rows = cached[1], cached[2]
            if needs_kind:
                kind = task_kind(matched)
            gathered = time.perf_counter_ns()
        else:
            if matched is requirements:
                rows, only, excluded, eval_rows = self._resolve_prepared(matched)
            else:
                rows, only, excluded, eval_rows = self._resolve_parsed(matched)
            if needs_kind:
                kind = task_kind(matched)
            gathered = time.perf_counter_ns()
            if within is None:
                expl = self._index.explain(rows, only, excluded)
                self._remember(predicates, expl, eval_rows)
            else:
                expl = self._index.explain(rows, only, excluded, within)

        # score the eligible and choose
        scores: Scores | CustomScores
        if scorer is None:
            session_row = self._session_rows.get(session, -1) if session is not None else -1
            kid = self._kinds.get(kind, -1) if kind is not None else -1
            scores = self._index.score(expl, eval_rows, session_row, kid, self.weights)
        else:
            # a scorer is told the task's kind: needs_kind derived it above when none was given
            scores = self._custom_scores(scorer, expl, matched, session,
                                         kind if kind is not None else task_kind(matched))
        best = scores.best
        selected = time.perf_counter_ns()

        decl = self._declaration(best) if best >= 0 else None
        placement = Placement(
            self.engine, self._index, matched, submitted, route.name if route is not None else None,
            session, kind, expl, scores, scorer is not None, decl,
            self._declaration_json(best) if decl is not None else None,
            gathered - started, selected - gathered, time.time_ns(), self.generation,
            reason_limit=reason_limit)
        return placement

    def place_many(self, requirements_list: Iterable[Mapping[str, Any] | Requirements], *,
                   sessions: Sequence[str | None] | None = None, workers: int | None = None,
                   scorer: Scorer | None = None, kind: str | None = None,
                   remember_session: bool = True, reason_limit: int | None = None) -> list[Placement]:
        """Place a batch on `workers` threads (default: one per core) with the same results and
        records as `place` one at a time, in order (§6 timings aside).

        Every task is parsed before any is placed (an invalid one raises SchemaError and places
        nothing). The batch holds the fleet's lock: updates from other threads wait for it, so it
        sees one membership. The native engine's explain and score loops run without the GIL, so
        placements proceed on every core. What must stay sequential: a bound placement makes its
        agent hold the task's session, which changes the affinity of later tasks of that session,
        so with `remember_session` the tasks of one session run in order on one thread (and
        different sessions, and tasks without one, in parallel). `generation` is numbered as if
        the batch ran in order.
        """
        with self._lock:
            tasks = [parse_requirements(r) for r in requirements_list]
            if sessions is not None and len(sessions) != len(tasks):
                raise ValueError(f"sessions: {len(sessions)} for {len(tasks)} tasks")
            chosen = [s if s is not None else t.session
                      for t, s in zip(tasks, sessions if sessions is not None else [None] * len(tasks))]
            units: list[list[int]] = []
            chains: dict[str, list[int]] = {}
            for i, session in enumerate(chosen):
                if remember_session and session is not None:
                    chain = chains.get(session)
                    if chain is None:
                        chain = chains[session] = []
                        units.append(chain)
                    chain.append(i)
                else:
                    units.append([i])
            for session in chains:   # no row is added while other threads read the rows
                self._session_row(session)
            placements: list[Placement | None] = [None] * len(tasks)
            held = [False] * len(tasks)
            pending = iter(units)    # taken one unit at a time by whichever thread is free

            def work() -> None:
                for unit in pending:
                    for i in unit:
                        p = placements[i] = self._place(
                            tasks[i], chosen[i], None, scorer=scorer, kind=kind, reason_limit=reason_limit)
                        task_session = chosen[i]
                        if p.agent is not None and remember_session and task_session is not None:
                            held[i] = self._hold_in_batch(p.agent, task_session)

            n = max(1, min(workers or os.cpu_count() or 1, len(units)))
            if n == 1:
                work()
            else:
                with ThreadPoolExecutor(n, thread_name_prefix="a3fast-place") as pool:
                    for future in [pool.submit(work) for _ in range(n)]:
                        future.result()
            generation = self.generation
            for p, did_hold in zip(placements, held):
                assert p is not None  # work() placed every task
                p.generation = generation
                generation += did_hold
            self.generation = generation
            return placements  # type: ignore[return-value]

    def _candidate_ids(self, names: Iterable[str]) -> list[int]:
        """The ids of the named agents that are in the fleet (other names are left out)."""
        ids, agents = self._ids, self._agents
        if isinstance(names, str):
            raise TypeError("candidates: expected an iterable of agent names, found one string")
        return [aid for aid in (ids.get(n) for n in names if isinstance(n, str))
                if aid is not None and agents[aid] is not None]

    def _hold_in_batch(self, agent: str, session: str) -> bool:
        """`hold_session` for a placement of a batch (its session row exists; `generation` is
        numbered by the batch). True if the agent did not hold it yet."""
        aid = self._ids[agent]
        row = self._session_rows[session]
        holds = self._held_sessions.setdefault(aid, set())
        if row in holds:
            return False
        holds.add(row)
        self._index.set_bit(row, aid)
        return True

    def resume(self, earlier: Placement, *, seq: int | None = None) -> Placement:
        """A resumed placement (§6): back to the agent `earlier` chose, with no candidates weighed.

        The agent must still be in the fleet and its current declaration must still satisfy every
        predicate matched the first time, since the resumed record is held to the same checks (§7).
        """
        agent = resumed_agent(earlier)
        decl = self.get(agent)
        json = self._declaration_json(self._ids[agent]) if decl is not None else None
        return resumed(earlier, self.engine, decl, json, self.generation, seq)

    def explain(self, requirements: Mapping[str, Any] | Requirements) -> Explanation:
        """The filter and first-failed explanation of a task (§5), without scoring: the engine's
        Explanation (candidate, eligible and per-predicate failed id sets)."""
        matched = parse_requirements(requirements)
        resolve = self._resolve_prepared if matched is requirements else self._resolve_parsed
        rows, only, excluded, _ = resolve(matched)
        return self._index.explain(rows, only, excluded)

    def all_failed(self, requirements: Mapping[str, Any] | Requirements) -> dict[str, list[str]]:
        """Every predicate each ineligible agent fails, not only the first (derivation order).

        One set difference per predicate over the index; asked for on request only, since it costs
        O(P·N) where the first-failed explanation costs O(P) set operations.
        """
        req = parse_requirements(requirements)
        index = self._index
        live = index.live_ids()
        live_set = set(live)
        failing: list[tuple[str, set[int]]] = []
        for p in req.predicates:
            kind, _, arg = p.partition(":")
            if kind == ANTI_AFFINITY:
                aid = self._ids.get(arg)
                failing.append((p, {aid} & live_set if aid is not None else set()))
            elif kind == AGENT_REF:
                failing.append((p, live_set - {self._ids.get(arg)}))
            else:
                failing.append((p, live_set - set(index.row_ids(self._rows.get(p, -1)))))
        out: dict[str, list[str]] = {}
        for aid in live:
            missed = [p for p, ids in failing if aid in ids]
            if missed:
                out[index.name(aid)] = missed
        return out

    def forget_explanations(self) -> None:
        """Empty the reuse of repeated tasks' explanations, so the next placement of every task is
        met afresh (benchmarks measure both)."""
        self._explained.clear()

    @property
    def index(self) -> Index:
        """The engine's index behind this fleet, read-only, for tools that measure or inspect its
        rows (`row_ids`, `row_count`, `explain`); changing it directly breaks the fleet."""
        return self._index

    def filter_rows(self, requirements: Mapping[str, Any] | Requirements) -> list[int]:
        """The index rows of a task's filter predicates in derivation order (-1 for a predicate no
        agent satisfies), for tools that work on the rows themselves."""
        return list(self._resolve_parsed(parse_requirements(requirements))[0])

    def _resolve(self, matched: Requirements) -> tuple[list[int], int, list[int], list[int]]:
        """The predicates as the engine's arguments: filter rows, agentRef id, excluded ids, and the
        rows of agents that substantiate each required capability."""
        row_of, id_of, eval_of = self._rows, self._ids, self._eval_rows
        rows: list[int] = []
        excluded: list[int] = []
        eval_rows: list[int] = []
        only = self._engine.NO_AGENT_REF
        for p in matched.predicates:
            # most predicates name an interned row: look it up before classifying the string
            row = row_of.get(p)
            if row is not None:
                rows.append(row)
                if p.startswith(_CAPABILITY):
                    eval_rows.append(eval_of.get(p, -1))
            elif p.startswith(_ANTI):
                excluded.append(id_of.get(p[len(_ANTI):], -1))
            elif p.startswith(_AGENT_REF):
                only = id_of.get(p[len(_AGENT_REF):], -1)
            else:   # a predicate no agent satisfies
                rows.append(-1)
                if p.startswith(_CAPABILITY):
                    eval_rows.append(-1)
        return rows, only, excluded, eval_rows

    def _interned(self) -> int:
        """Grows whenever a row or an agent id is interned, which is what can change a resolution."""
        return len(self._rows) + len(self._eval_rows) + len(self._ids)

    def _resolve_prepared(self, matched: Requirements) -> tuple[list[int], int, list[int], list[int]]:
        """`_resolve` for a Requirements object the caller keeps and places again (a prepared task)."""
        stamp = self._interned()
        cache = self._resolved
        entry = cache.get(id(matched))
        # the entry holds `matched` itself, so its id cannot be reused by another object meanwhile
        if entry is not None and entry[0] is matched and entry[1] == stamp:
            return entry[2]
        if len(cache) >= RESOLVED_CACHE_SIZE:
            cache.clear()
        resolved = self._resolve(matched)
        cache[id(matched)] = (matched, stamp, resolved)
        return resolved

    def _resolve_parsed(self, matched: Requirements) -> tuple[list[int], int, list[int], list[int]]:
        """`_resolve` for requirements parsed for one placement: the engine arguments depend only on
        the predicates, so they are kept per predicate set."""
        stamp = self._interned()
        cache = self._resolved
        entry = cache.get(matched.predicates)
        if entry is None or entry[0] != stamp:
            if len(cache) >= RESOLVED_CACHE_SIZE:
                cache.clear()
            entry = cache[matched.predicates] = (stamp, self._resolve(matched))
        return entry[1]

    def _remember(self, predicates: tuple[str, ...], expl: Any, eval_rows: list[int]) -> None:
        cache = self._explained
        if len(cache) * max(self._count, 1) >= EXPLAINED_CACHE_BUDGET:
            cache.clear()
        cache[predicates] = (self.membership, expl, eval_rows)

    def _custom_scores(self, scorer: Scorer, expl: Explanation, matched: Requirements, session: str | None,
                       kind: str) -> CustomScores:
        """Scores from a caller's scorer: one mapping with a numeric `total` per eligible agent."""
        ids = expl.eligible_ids()
        agents = [self._declaration(i) for i in ids]
        task = ScoringTask(matched, session, kind,
                           outcomes=lambda name: self.outcomes(name, kind) if kind is not None else (0, 0),
                           holds_session=lambda name: session is not None and self.holds_session(name, session))
        raw = list(scorer(task, agents))
        if len(raw) != len(ids):
            raise A3Error(f"scorer returned {len(raw)} scores for {len(ids)} eligible agents")
        entries = []
        for decl, entry in zip(agents, raw):
            total = entry.get("total") if isinstance(entry, Mapping) else None
            if isinstance(total, bool) or not isinstance(total, (int, float)) or not math.isfinite(total):
                # JSON has no NaN or infinity: the record could not state such a total
                raise A3Error(f"scorer gave agent {decl.agent.name!r} no finite numeric 'total'")
            entries.append({"total": float(total), **{k: v for k, v in entry.items() if k != "total"}})
        best = choose([d.agent.name for d in agents], [e["total"] for e in entries])
        return CustomScores(ids, entries, ids[best] if best >= 0 else -1)

    # -- internals --------------------------------------------------------------------------------
    def _declaration_json(self, aid: int) -> bytes:
        """An agent's declaration as JSON, encoded the first time a record needs it, since most agents
        of a large fleet are never chosen and encoding on joining would slow every add."""
        entry = self._agents[aid]
        if type(entry) is bytes:
            if entry is _IN_SNAPSHOT:
                entry = self._snapshot[self._snapshot_spans[aid]:self._snapshot_spans[aid + 1]]
            if is_packed(entry):
                assert self._codec is not None, "packed declarations come with their codec"
                return self._codec.unpack(entry)
            return entry
        text = self._decl_json[aid]
        if text is None:
            text = self._decl_json[aid] = orjson.dumps(self._declaration(aid).doc)
        return text

    def _declaration(self, aid: int) -> Declaration:
        """A live agent's Declaration, parsed from its canonical JSON the first time it is asked for
        when the fleet was loaded in bulk."""
        entry = self._agents[aid]
        if isinstance(entry, Declaration):
            return entry
        if entry is None:
            raise FleetError(f"agent id {aid} has been removed from the fleet")
        text = self._declaration_json(aid)
        decl = parse_declaration(orjson.loads(text))
        self._decl_json[aid] = text
        self._agents[aid] = decl
        return decl

    def _rows_of(self, aid: int) -> tuple[int, ...]:
        """A live agent's index rows: kept, or derived again from its declaration, whose every value
        was interned when it joined (so `_rows_for` finds them all and interns nothing)."""
        rows = self._member_rows[aid]
        if rows is None:
            rows = self._rows_for(self._declaration(aid))
        return rows

    def _row(self, key: str) -> int:
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = self._index.add_row()
        return row

    def _rows_for(self, decl: Declaration, new_row=None) -> tuple[int, ...]:
        """The rows of `declaration_keys(decl)`, then of `evaluated_keys(decl)`, in that order.

        A predicate string is built (by `predicates`) and interned only the first time its field
        value is seen; after that the row is found from the value itself, so adding an agent whose
        values the fleet has seen builds no strings. `new_row(kind, value)`, when given, numbers an
        unseen value instead of interning it (a batch that may yet be refused)."""
        by_kind = self._field_rows
        field_row = self._field_row if new_row is None else new_row
        rows: list[int] = []
        cached = by_kind[CAPABILITY]
        for c in decl.capabilities:
            row = cached.get((c.name, c.version))
            rows.append(row if row is not None else field_row(CAPABILITY, (c.name, c.version)))
        for kind, values in ((CLEARANCE, decl.clearances), (TOOL, decl.tools or ()), (RESIDENCY, decl.residency or ())):
            cached = by_kind[kind]
            for value in values:
                row = cached.get(value)
                rows.append(row if row is not None else field_row(kind, value))
        if decl.model is not None and decl.model.latency_class is not None:
            cls = decl.model.latency_class
            row = by_kind[LATENCY].get(cls)
            rows.append(row if row is not None else field_row(LATENCY, cls))
        cached = by_kind[EVALUATED]
        for c in decl.capabilities:
            if c.substantiated:
                row = cached.get((c.name, c.version))
                rows.append(row if row is not None else field_row(EVALUATED, (c.name, c.version)))
        return tuple(dict.fromkeys(rows))   # a repeated field keeps its first place, as in `predicates`

    def _field_row(self, kind: str, value) -> int:
        """Intern the predicate string of one declared value (the first time it is seen)."""
        if kind == EVALUATED:
            row = self._eval_row(capability(*value))
        else:
            row = self._row(capability(*value) if kind == CAPABILITY else _KEY_OF[kind](value))
        self._field_rows[kind][value] = row
        return row

    def _eval_row(self, key: str) -> int:
        row = self._eval_rows.get(key)
        if row is None:
            row = self._eval_rows[key] = self._index.add_row()
        return row

    def _session_row(self, session: str) -> int:
        """The row of agents holding `session`, made the first time the session is held."""
        row = self._session_rows.get(session)
        if row is None:
            row = self._session_rows[session] = self._index.add_row()
        return row

    def _kind(self, kind: str) -> int:
        """The outcome column of a task kind, made the first time an outcome of it is recorded."""
        kid = self._kinds.get(kind)
        if kid is None:
            kid = self._kinds[kind] = self._index.new_kind()
        return kid

    def _live_id(self, name: str) -> int:
        aid = self._ids.get(name)
        if aid is None or self._agents[aid] is None:
            raise FleetError(f"no agent named {name!r} in the fleet")
        return aid

    def index_nbytes(self) -> int:
        """Bytes held by the engine's index (rows and live set)."""
        return self._index.nbytes()

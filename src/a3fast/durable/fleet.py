"""A fleet kept durable: the one cycle of the service and of each shard of a ShardedFleet.

The cycle, for every change:

1. **apply** — the change is made on the fleet in memory (a change the fleet refuses is never
   journaled, so a restart cannot bring back what was answered with an error);
2. **journal** — its entry (a3fast.durable.journal) is appended to the current journal generation;
3. **acknowledge after the log** — the change is answered only once its entry is written and, by
   the fsync policy ("always", "group" or "never"; see `Journal`), fsynced: by `await durable()`
   (the service, with group commit) or before `apply_now` returns (a shard);
4. **checkpoint** — every `checkpoint_every` entries (and at a clean stop) the journal moves to a
   new generation, the fleet's snapshot and the checkpoint naming it are written
   (a3fast.durable.statedir), and only then
5. **retire** — the generations and snapshots the checkpoint replaces are removed;
6. **recover** — a start loads the checkpoint's snapshot and replays every generation after it, in
   order, so the fleet is exactly what was acknowledged; anything that cannot be read back exactly
   is a StateError naming the file, the entry and the reason.

What differs between owners is given to `DurableFleet`, never written again: how the fleet is made
(`empty`, `load`), what the owner adds to a checkpoint (`document`, checked at a start against
`fields`), and, at `open`, what the owner restores from the checkpoint and how it replays entries
that are not changes (the service's trace entries).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Generic, Mapping, Protocol, TypeVar

from ..errors import A3Error, SnapshotUnreadable, describe, os_error_line
from .journal import (CHANGE, MAX_ENTRY, ChangedFleet, ChangeUnreadable, Journal, JournalFailed, apply_change,
                      decode_change, encode_change)
from .statedir import Entry, Recovered, StateDir, StateError

__all__ = ["DurableFleet", "Field", "KeptFleet"]


class KeptFleet(ChangedFleet, Protocol):
    """What a durable fleet asks of its fleet: the changes a journal replays, and a snapshot."""

    def save(self, path: Any) -> Any: ...


F = TypeVar("F", bound=KeptFleet)
#: A check of one field an owner adds to its checkpoint: None when the value is right, else what
#: was expected (the message names the file and the field).
Field = Callable[[Any], "str | None"]


class DurableFleet(Generic[F]):
    """A fleet, its journal and its checkpoints in `directory` (files named with `prefix`); with
    `directory=None`, a fleet kept in memory only (changes are applied, nothing is written)."""

    def __init__(self, directory: str | Path | None, *, empty: Callable[[], F], load: Callable[[Path], F],
                 prefix: str = "", fsync: str = "group", checkpoint_every: int = 50_000,
                 document: Callable[[], dict[str, Any]] = dict, fields: Mapping[str, Field] | None = None,
                 log: Callable[[str], None] | None = None, transient: tuple[type[Exception], ...] = ()):
        if fsync not in Journal.MODES:
            raise ValueError(f"fsync must be one of {Journal.MODES}, not {fsync!r}")
        self.log = log or (lambda message: print(f"a3fast: {message}", file=sys.stderr, flush=True))
        self.state: StateDir | None = (StateDir(Path(directory), prefix=prefix, log=self.log)
                                       if directory is not None else None)
        self.empty, self.load = empty, load
        self.fsync = fsync
        self.checkpoint_every = max(1, int(checkpoint_every))
        self.document = document
        self.fields = dict(fields or {})
        #: errors of a fleet that could not take a change now (a shard down), not of the entry
        self.transient = transient
        self.fleet: F = None    # type: ignore[assignment]  # made by `open` (read on hot paths, so no property)
        self.journal: Journal | None = None
        #: entries appended since the last checkpoint was attempted (restarted by every attempt, so
        #: a failing disk is not asked for a checkpoint at every change)
        self.since_checkpoint = 0
        #: the owner's part of the newest checkpoint (read back at `open`, or written since)
        self.checkpointed: dict[str, Any] | None = None

    # -- recover ----------------------------------------------------------------------------------
    def open(self, *, restore: Callable[[dict[str, Any] | None], None] | None = None,
             replay_other: Callable[[Entry], None] | None = None,
             applied: Callable[[dict[str, Any]], None] | None = None) -> Recovered | None:
        """Recover: the checkpoint's fleet loaded (`load`) or an empty one, `restore(checkpoint)`
        called with the owner's checked fields (None on a fresh directory), then every journal
        entry after the checkpoint replayed in order — a change through the fleet's own API (then
        `applied(change)`), any other entry by `replay_other(entry)` — and the journal opened for
        appending to the newest generation. StateError for anything not read back exactly."""
        if self.state is None:
            self.fleet = self.empty()
            if restore is not None:
                restore(None)
            return None
        recovered = self.state.recover()
        try:
            return self._open(recovered, restore, replay_other, applied)
        except BaseException:
            self.state.release()
            raise

    def _open(self, recovered: Recovered, restore: Callable[[dict[str, Any] | None], None] | None,
              replay_other: Callable[[Entry], None] | None,
              applied: Callable[[dict[str, Any]], None] | None) -> Recovered:
        assert self.state is not None
        checkpoint = recovered.checkpoint
        if checkpoint is not None:
            assert recovered.snapshot is not None   # a checkpoint always names one
            self._check_fields(checkpoint)
            self.fleet = self._load(recovered.snapshot)
            self.checkpointed = {k: checkpoint[k] for k in self.fields}
        else:
            self.fleet = self.empty()
        if restore is not None:
            restore(checkpoint)
        for entry in recovered.entries:
            self._replay(entry, replay_other, applied)
        self.journal = Journal(self.state.journal_path(self.state.generation), fsync=self.fsync)
        self.journal.entries = sum(1 for e in recovered.entries if e.generation == self.state.generation)
        self.since_checkpoint = len(recovered.entries)
        return recovered

    def _check_fields(self, checkpoint: dict[str, Any]) -> None:
        assert self.state is not None
        for name, check in self.fields.items():
            if name not in checkpoint:
                raise StateError(f"{self.state.checkpoint_path()}: field {name!r}: missing; restore the state "
                                 f"directory from a copy")
            expected = check(checkpoint[name])
            if expected is not None:
                raise StateError(f"{self.state.checkpoint_path()}: field {name!r}: expected {expected}, found "
                                 f"{describe(checkpoint[name])}; restore the state directory from a copy")

    def _load(self, path: Path) -> F:
        try:
            return self.load(path)
        except StateError:
            raise
        except (OSError, SnapshotUnreadable) as exc:
            # the file is there but cannot be read (its permissions, a directory in its place):
            # what to mend is that, not the state's contents
            reason = exc.reason if isinstance(exc, SnapshotUnreadable) else exc.strerror or str(exc)
            raise StateError(f"{path}: cannot read the fleet snapshot the checkpoint names: {reason}") from None
        except A3Error as exc:
            raise StateError(f"{path}: cannot load the fleet snapshot the checkpoint names: {exc}; "
                             f"restore the state directory from a copy") from None
        except Exception as exc:   # a loader's unforeseen failure still names the file, never hangs a start
            raise StateError(f"{path}: cannot load the fleet snapshot the checkpoint names "
                             f"({type(exc).__name__}: {exc}); restore the state directory from a copy") from None

    def _replay(self, entry: Entry, replay_other: Callable[[Entry], None] | None,
                applied: Callable[[dict[str, Any]], None] | None) -> None:
        """One journal entry made again; StateError naming it if it cannot be."""
        try:
            if entry.payload[:1] == CHANGE:
                change = decode_change(entry.payload[1:])
                apply_change(self.fleet, change)
                if applied is not None:
                    applied(change)
            elif replay_other is not None:
                replay_other(entry)
            else:
                raise ChangeUnreadable(f"unknown entry type {entry.payload[:1]!r}")
        except StateError:
            raise
        except self.transient as exc:
            raise StateError(f"{entry.where()}: cannot be replayed: {exc}") from None
        except ChangeUnreadable as exc:
            raise StateError(f"{entry.where()}: unreadable: {exc}; restore the state directory from "
                             f"a copy") from None
        except Exception as exc:   # the fleet refused it: the entry does not follow what came before
            raise StateError(f"{entry.where()}: does not apply to the fleet before it "
                             f"({type(exc).__name__}: {exc}); restore the state directory from a copy") from None

    # -- apply, journal, acknowledge --------------------------------------------------------------
    @property
    def failed(self) -> str | None:
        """Why the journal could not be written, once it could not (nothing more is changed)."""
        return self.journal.failed if self.journal is not None else None

    def check_writable(self) -> None:
        if self.failed is not None:
            raise JournalFailed(self.failed)

    def apply(self, change: dict[str, Any], make: Callable[[], object] | None = None) -> None:
        """Steps 1-2: make a checked change (by `make()`, else through the fleet's API as a replay
        would), then append its entry. It is acknowledged once `durable()` or `sync()` returns."""
        self.check_writable()
        self._make(change, make)
        self.append(encode_change(change["op"], **{k: v for k, v in change.items() if k != "op"}))

    def apply_now(self, change: dict[str, Any], make: Callable[[], object] | None = None, *,
                  checkpoint_instead: bool = False) -> None:
        """Steps 1-4 for a caller without an event loop: make the change, then write its entry
        before returning (acknowledged on return), then a checkpoint if one is due.
        `checkpoint_instead`: a change so large that a checkpoint holds it instead of an entry."""
        self.check_writable()
        self._make(change, make)
        if checkpoint_instead and self.state is not None:
            self.checkpoint()
        else:
            self.write_now(encode_change(change["op"], **{k: v for k, v in change.items() if k != "op"}))

    def _make(self, change: dict[str, Any], make: Callable[[], object] | None) -> None:
        if make is not None:
            make()
        else:
            apply_change(self.fleet, change)

    def append(self, payload: bytes) -> None:
        """Append an entry (a change already made, or an owner's entry) for the next commit."""
        if self.journal is not None:
            self.journal.append(payload)
            self.since_checkpoint += 1

    def write_now(self, payload: bytes) -> None:
        """The entry of a change already made, acknowledged on return: written (and fsynced by the
        policy) now, or, when larger than an entry may be, held by a checkpoint instead; then a
        checkpoint if one is due."""
        if self.journal is None:
            return
        if len(payload) > MAX_ENTRY:
            self.checkpoint()
            return
        self.journal.write_now(payload)
        self.since_checkpoint += 1
        self.maybe_checkpoint()

    async def durable(self) -> None:
        """Step 3: wait until every entry appended so far is durable (no-op without a directory)."""
        if self.journal is not None:
            await self.journal.durable()

    def sync(self) -> None:
        """Write (and fsync) every entry appended so far, blocking."""
        if self.journal is not None:
            self.journal.sync()

    # -- checkpoint and retire --------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Steps 4-5 (a3fast.durable.statedir): the journal written so far made durable, a new
        generation started, the fleet's snapshot and the checkpoint naming it (with the owner's
        `document()`) written, then the generations and snapshots it replaces removed. Raises
        what went wrong (JournalFailed when the journal has failed: memory then holds changes
        that were never acknowledged); a checkpoint that fails part-way changes nothing a restart
        reads back, since the journal still holds every change since the last one that completed."""
        if self.state is None or self.journal is None:
            return
        self.journal.sync()
        self.since_checkpoint = 0
        document = self.document()
        self.journal.switch(self.state.next_generation())
        self.state.commit(self.fleet.save, document)
        self.checkpointed = {k: document[k] for k in self.fields if k in document}

    def try_checkpoint(self) -> bool:
        """`checkpoint`, with a disk error or a refusal logged rather than raised: the fleet goes
        on, its journal keeps every change since the last checkpoint."""
        if self.journal is None:
            return False
        try:          # JournalFailed is raised, not logged: the owner must stop changing
            self.checkpoint()
            return True
        except (OSError, A3Error) as exc:
            why = os_error_line(exc) if isinstance(exc, OSError) else exc
            self.log(f"no checkpoint taken: {why}; the journal keeps every change since the last one")
            return False

    def maybe_checkpoint(self) -> None:
        """A checkpoint once `checkpoint_every` entries have been appended since the last one."""
        if self.journal is not None and self.failed is None and self.since_checkpoint >= self.checkpoint_every:
            self.try_checkpoint()

    def close(self, *, checkpoint: bool = True) -> None:
        """Write everything appended; with `checkpoint`, first take one if anything was appended
        since the last (not after a failed journal write: memory then holds changes that were
        never acknowledged), so the next start is quick."""
        if self.journal is not None:
            if checkpoint and self.since_checkpoint and self.failed is None:
                self.try_checkpoint()
            self.journal.close()
            self.journal = None
        if self.state is not None:
            self.state.release()


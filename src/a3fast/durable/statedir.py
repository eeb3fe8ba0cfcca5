"""A state directory: a checkpoint, the fleet snapshot it names, and the journal's generations after
it — the one durability protocol of the service and of each shard of a ShardedFleet.

Files (each owner has a prefix: "" for the service, "shard-I." for shard I):

- `journal.G` (G a zero-padded generation number): framed entries (a3fast.durable.journal), each one change
  acknowledged after its entry is durable. A new generation starts at every checkpoint.
- `checkpoint`: one framed JSON document naming the generation G it was taken at and the fleet
  snapshot (`fleet.G.a3snap`: `Fleet.save`, or a ShardedFleet's directory) that holds everything
  in the generations before G, plus what its owner adds (the service: next seq, trace position).

A checkpoint, step by step: (1) the current generation G-1 written and fsynced; (2) `journal.G`
created, fsynced and the directory fsynced, and appends go to it; (3) the fleet snapshot written
(whole or not at all); (4) the checkpoint written whole (a3fast.files: a temporary file
beside it written and fsynced, renamed over `checkpoint`, the directory fsynced); (5) the generations before G and the older snapshots removed, the directory
fsynced. A start loads the checkpoint and replays every generation from its own, in order: a stop
at any step leaves either the old checkpoint with every generation it needs (G-1 is removed only
after step 4), or the new one; an entry is replayed exactly once either way.

Every filesystem step goes through `step`, which names it, so a test can stop the process at each
one (`A3FAST_STOP_AT_STEP=N` kills the process with SIGKILL just before its Nth step, as a crash
there would end it; `A3FAST_FAIL_AT_STEP=N` makes that step raise OSError(EIO), as a failing disk
would; `A3FAST_STEP_LOG=FILE` appends a line `N NAME PATH` for each step to FILE first).

One process owns a state directory's files of a prefix at a time: `recover` takes a lock on
`lock` (a POSIX record lock, held until `release` or the process ends, which the kernel sees to
even after SIGKILL) and refuses to start, StateError, while another process holds it — two
owners would each checkpoint and retire the generations the other still appends to. A fresh
directory's parents are fsynced after it is made, so the directory itself survives a power loss
once a change in it is acknowledged.

A start trusts nothing it reads: the checkpoint must be one whole framed entry holding a JSON
object in this format, naming a generation (an integer from 1) and exactly the snapshot file of
that generation; every journal entry is checked by its length and CRC (a3fast.durable.journal) and
then, as a change, by every field's type. Anything else is a StateError (an a3fast.SnapshotError)
naming the file, the entry or field, and the reason; `a3fast serve` exits 2 on it.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import orjson

from ..errors import SnapshotError, describe
from ..files import TEMP_MARK, fsync_directory, write_atomic
from .journal import JournalCorrupt, frame, read_entries

__all__ = ["StateDir", "StateError", "Entry", "Recovered", "step"]

_STOP_AT = os.environ.get("A3FAST_STOP_AT_STEP")
_FAIL_AT = os.environ.get("A3FAST_FAIL_AT_STEP")
_STEP_LOG = os.environ.get("A3FAST_STEP_LOG")
_steps_taken = 0

CHECKPOINT = "checkpoint"
CHECKPOINT_FORMAT = 4
JOURNAL_PREFIX = "journal."
SNAPSHOT_PREFIX = "fleet."
SNAPSHOT_SUFFIX = ".a3snap"
LOCK = "lock"
#: The last generation a journal's name (8 digits) holds.
MAX_GENERATION = 99_999_999

#: The lock files this process holds, by real path: [descriptor, owners holding it]. A POSIX record
#: lock belongs to the process, and closing any descriptor of its file lets it go: one descriptor
#: per file, closed when the last owner in this process that holds it releases it.
_held_locks: dict[str, list[int]] = {}


class StateError(SnapshotError):
    """State on disk that cannot be read back exactly (exit 2 at start): the message names the
    file, the entry or field, and the reason."""


def step(name: str, path: Path | str) -> None:
    """One filesystem step about to be taken (see the module docstring)."""
    global _steps_taken
    _steps_taken += 1
    if _STEP_LOG:
        with open(_STEP_LOG, "a") as fh:
            fh.write(f"{_steps_taken} {name} {os.fspath(path)}\n")
    if _STOP_AT is not None and _steps_taken == int(_STOP_AT):
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if _FAIL_AT is not None and _steps_taken == int(_FAIL_AT):
        raise OSError(errno.EIO, f"injected failure before step {_steps_taken} ({name} {path})")


#: A checkpoint is one small document (a generation, a file name, the owner's few fields): one
#: larger than this is not one, and is not read into memory to find that out.
MAX_CHECKPOINT_BYTES = 1 << 20


def _read_state_file(path: Path, limit: int | None = None) -> bytes:
    """A state file's bytes; StateError for one that is not a regular file (a device or a pipe put in
    its place would be read without end) or is longer than `limit`. FileNotFoundError passes."""
    with open(path, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise StateError(f"{path}: not a regular file (a state file is one a3fast wrote); restore the "
                             f"state directory from a copy")
        if limit is not None and info.st_size > limit:
            raise StateError(f"{path}: {info.st_size:,} bytes, more than any a3fast writes there ({limit:,}); "
                             f"restore the state directory from a copy")
        return fh.read()


def _fsync_dir(path: Path) -> None:
    step("fsync-dir", path)
    fsync_directory(path)


@dataclass
class Entry:
    """A journal entry read back: where it is (file, generation, number from 1, byte offset)."""
    path: Path
    generation: int
    number: int
    offset: int
    payload: bytes

    def where(self) -> str:
        return f"{self.path}: entry {self.number} (generation {self.generation}, byte {self.offset})"


@dataclass
class Recovered:
    checkpoint: dict[str, Any] | None       # the checkpoint's document, None on a fresh directory
    snapshot: Path | None                   # the fleet snapshot it names
    generation: int                         # the generation appends continue in
    entries: list[Entry] = field(default_factory=list)
    cut_bytes: int = 0                      # bytes cut from the end of the last generation


class StateDir:
    """The files of one owner in a directory (see the module docstring)."""

    def __init__(self, directory: Path, prefix: str = "", log: Callable[[str], None] | None = None):
        self.directory = Path(directory)
        self.prefix = prefix
        self.log = log or (lambda message: None)
        self.generation = 0
        self._lock_key: str | None = None       # the lock this owner holds (`lock`)

    def path(self, name: str) -> Path:
        return self.directory / f"{self.prefix}{name}"

    def checkpoint_path(self) -> Path:
        return self.path(CHECKPOINT)

    def journal_path(self, generation: int) -> Path:
        return self.path(f"{JOURNAL_PREFIX}{generation:08d}")

    def snapshot_name(self, generation: int) -> str:
        return f"{self.prefix}{SNAPSHOT_PREFIX}{generation:08d}{SNAPSHOT_SUFFIX}"

    def _generations(self) -> list[int]:
        pattern = re.compile(re.escape(self.prefix + JOURNAL_PREFIX) + r"(\d{8})$")
        found = []
        for p in self.directory.iterdir():
            m = pattern.match(p.name)
            if m:
                found.append(int(m.group(1)))
        return sorted(found)

    # -- start ------------------------------------------------------------------------------------
    def recover(self) -> Recovered:
        """The checkpoint and every journal entry after it; StateError for anything that cannot be
        read back exactly. Leftovers of an interrupted checkpoint are removed."""
        self._make_directory()
        self.lock()
        try:
            return self._recover()
        except BaseException:
            self.release()
            raise

    def _make_directory(self) -> None:
        """The directory, made with its parents where missing, each made one fsynced into its parent."""
        missing = []
        path = self.directory
        while not path.exists() and path != path.parent:
            missing.append(path)
            path = path.parent
        self.directory.mkdir(parents=True, exist_ok=True)
        for made in reversed(missing):
            _fsync_dir(made.parent)

    def lock(self) -> None:
        """Hold this owner's lock file (module doc); StateError when another process holds it. On a
        filesystem that keeps no record locks the owner goes on without one, and says so."""
        if self._lock_key is not None:
            return
        path = self.path(LOCK)
        key = os.path.realpath(path)
        held = _held_locks.get(key)
        if held is not None:        # another owner in this process: the process holds the lock
            held[1] += 1
            self._lock_key = key
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                self.log(f"{path}: cannot lock the state directory here ({exc.strerror}); make sure no "
                         f"other process uses it while this one runs")
                return
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            raise StateError(f"{path}: the state directory is in use by another a3fast process"
                             f"{f' (pid {holder})' if holder.isdigit() else ''}; one process owns a "
                             f"state directory at a time: stop that one first, or give this one "
                             f"another directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        _held_locks[key] = [fd, 1]
        self._lock_key = key

    def release(self) -> None:
        """Let this owner's hold on the lock go (nothing when it holds none); the lock itself goes
        with the last owner in this process that holds it."""
        key, self._lock_key = self._lock_key, None
        if key is None:
            return
        held = _held_locks.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] == 0:
            del _held_locks[key]
            os.close(held[0])

    def _recover(self) -> Recovered:
        checkpoint = self.read_checkpoint()
        generations = self._generations()
        if checkpoint is None:
            if generations and generations[0] != 1:
                raise StateError(f"{self.journal_path(generations[0])}: journal generation "
                                 f"{generations[0]} has no checkpoint {self.path(CHECKPOINT)} covering the "
                                 f"generations before it (removed or lost); restore the state directory "
                                 f"from a copy")
            start = 1
            snapshot = None
        else:
            start = checkpoint["generation"]
            snapshot = self.directory / checkpoint["fleet"]
            if not snapshot.exists():
                raise StateError(f"{snapshot}: the fleet snapshot named by {self.path(CHECKPOINT)} is "
                                 f"missing; restore the state directory from a copy")
            if start not in generations:
                raise StateError(f"{self.journal_path(start)}: missing beside {self.path(CHECKPOINT)}, which "
                                 f"needs journal generation {start} and every later one: the changes "
                                 f"acknowledged since the checkpoint are not there; restore the journal "
                                 f"from a copy")
        replay = [g for g in generations if g >= start]
        for expected, g in enumerate(replay, start):
            if g != expected:
                raise StateError(f"{self.journal_path(expected)}: journal generation {expected} is missing "
                                 f"between {self.journal_path(start)} and {self.journal_path(g)}; restore "
                                 f"the state directory from a copy")
        recovered = Recovered(checkpoint, snapshot, replay[-1] if replay else start)
        for g in replay:
            entries, cut = self._read_generation(g, last=g == replay[-1])
            recovered.entries.extend(entries)
            recovered.cut_bytes += cut
        self._remove_leftovers(start, checkpoint["fleet"] if checkpoint else None)
        if not replay:
            self._create_journal(start)
        self.generation = recovered.generation
        return recovered

    def read_checkpoint(self) -> dict[str, Any] | None:
        """The checkpoint's document, None when there is none; StateError for one that cannot be
        read back exactly."""
        path = self.path(CHECKPOINT)
        try:
            data = _read_state_file(path, MAX_CHECKPOINT_BYTES)
        except FileNotFoundError:
            return None
        try:
            recovered = read_entries(data, str(path))
        except JournalCorrupt:
            recovered = None
        if recovered is None or len(recovered.entries) != 1 or recovered.cut_bytes:
            raise StateError(f"{path}: the checkpoint is damaged (bad length or checksum); restore the "
                             f"state directory from a copy")
        try:
            document = orjson.loads(recovered.entries[0])
        except orjson.JSONDecodeError as exc:
            raise StateError(f"{path}: the checkpoint is not JSON ({exc}); restore the state directory "
                             f"from a copy") from None
        if not isinstance(document, dict):
            raise StateError(f"{path}: the checkpoint is {describe(document)}, not a JSON object; restore "
                             f"the state directory from a copy")
        found = document.get("format")
        if type(found) is not int or found != CHECKPOINT_FORMAT:
            raise StateError(f"{path}: field 'format': checkpoint format {describe(found)} is not "
                             f"{CHECKPOINT_FORMAT}, the one this a3fast reads")
        generation = document.get("generation")
        if type(generation) is not int or not 1 <= generation <= MAX_GENERATION:
            raise StateError(f"{path}: field 'generation': expected an integer from 1 to {MAX_GENERATION}, found "
                             f"{describe(generation)}; restore the state directory from a copy")
        if document.get("fleet") != self.snapshot_name(generation):
            raise StateError(f"{path}: field 'fleet': expected {self.snapshot_name(generation)!r}, the "
                             f"snapshot of generation {generation}, found {describe(document.get('fleet'))}; "
                             f"restore the state directory from a copy")
        return document

    def _read_generation(self, generation: int, last: bool) -> tuple[list[Entry], int]:
        path = self.journal_path(generation)
        data = _read_state_file(path)
        try:
            read = read_entries(data, str(path))
        except JournalCorrupt as exc:
            raise StateError(f"{exc} (generation {generation})") from None
        if read.cut_bytes:
            where = (f"{path}: the last {read.cut_bytes} bytes (from byte {read.good_bytes}, after entry "
                     f"{len(read.entries)} of generation {generation}) are not a whole entry")
            if not last:
                raise StateError(f"{where}, and a later generation follows: the journal is damaged; "
                                 f"restore the state directory from a copy")
            self.log(f"{where}: cut. A write cut short by a stop is never acknowledged, but damage to "
                     f"the end of the file looks the same, so the change it held may or may not have "
                     f"been acknowledged")
            step("truncate", path)
            with open(path, "r+b") as fh:
                fh.truncate(read.good_bytes)
                os.fsync(fh.fileno())
        offsets = read.offsets or []
        return [Entry(path, generation, n, offsets[n - 1], payload)
                for n, payload in enumerate(read.entries, 1)], read.cut_bytes

    def _remove_leftovers(self, generation: int, snapshot: str | None) -> None:
        """Generations and snapshots an interrupted checkpoint left behind, and its temporary files."""
        removed = False
        for g in self._generations():
            if g < generation:
                self._remove(self.journal_path(g))
                removed = True
        for p in list(self.directory.iterdir()):
            name = p.name
            if name.startswith("." + self.prefix) and TEMP_MARK in name:
                rest = name[1 + len(self.prefix):]     # a temporary file of a checkpoint or snapshot
                if rest.startswith((CHECKPOINT + TEMP_MARK, SNAPSHOT_PREFIX)):
                    self._remove(p)
                    removed = True
                continue
            if not name.startswith(self.prefix):
                continue
            rest = name[len(self.prefix):]
            if (rest.startswith(SNAPSHOT_PREFIX) and rest.endswith(SNAPSHOT_SUFFIX) and name != snapshot) \
                    or rest == CHECKPOINT + ".tmp":    # the temporary file of a3fast before a3fast.files
                self._remove(p)
                removed = True
        if removed:
            _fsync_dir(self.directory)

    def _remove(self, path: Path) -> None:
        step("remove", path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)

    def _create_journal(self, generation: int) -> Path:
        path = self.journal_path(generation)
        step("create", path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            step("fsync", path)
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(self.directory)
        return path

    # -- checkpoint -------------------------------------------------------------------------------
    def next_generation(self) -> Path:
        """Steps 1-2 of a checkpoint (the caller has written and fsynced the current generation):
        the next generation's journal, created and durable. Appends go there from now on.
        StateError past the last generation a journal's name holds (8 digits): the generation
        keeps growing, with no checkpoint, rather than write one the next start refuses."""
        if self.generation >= MAX_GENERATION:
            raise StateError(f"{self.journal_path(self.generation)}: the last journal generation "
                             f"({MAX_GENERATION:,}); move the fleet to a new state directory (save it, then "
                             f"start with --fleet) to take checkpoints again")
        path = self._create_journal(self.generation + 1)
        self.generation += 1     # only once the file is durable: until then appends stay where they are
        return path

    def commit(self, save_snapshot: Callable[[Path], None], document: dict[str, Any]) -> None:
        """Steps 3-5 of a checkpoint at the current generation: the fleet snapshot written by
        `save_snapshot(path)`, then the checkpoint naming it and `document`, then what it replaces
        removed."""
        generation = self.generation
        name = self.snapshot_name(generation)
        step("snapshot", self.directory / name)
        save_snapshot(self.directory / name)
        data = frame(orjson.dumps({"format": CHECKPOINT_FORMAT, **document, "generation": generation,
                                   "fleet": name}))
        write_atomic(self.path(CHECKPOINT), data, step=step)
        self._remove_leftovers(generation, name)

"""Files a3fast writes whole or not at all.

Every file a3fast writes as a whole — an output of a subcommand, a fleet snapshot, a checkpoint, a
report, a cache — is written the same way: a temporary file beside its target, written, fsynced,
renamed over the target, then the directory fsynced, so that a stop at any point leaves either the
old file or the new one, never part of one, and a rename that returned survives a power loss. A
target that is not a regular file (/dev/null, a FIFO, a socket) is written in place: renaming a
file over it would destroy it.

Temporary files are named `.NAME.a3fast-tmp.<pid>.<random>`, so that one left behind by a killed
process can be recognised and removed once that process is gone (`remove_stale_temps`).

`step`, where a caller passes one, is called with a step's name and the target's path just before
each filesystem step ("write", "fsync", "rename", "fsync-dir"): a3fast.durable.statedir names its
steps so, for the crash-point tests.
"""
from __future__ import annotations

import os
import re
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterator

__all__ = ["TEMP_MARK", "atomic_file", "write_atomic", "temp_beside", "replace_into", "fsync_directory",
           "is_special", "remove_stale_temps"]

#: Marks a temporary file: `.NAME` + TEMP_MARK + `<pid>.<random>`.
TEMP_MARK = ".a3fast-tmp."
_TEMP_NAME = re.compile(r"\..+" + re.escape(TEMP_MARK) + r"([0-9]+)\.[A-Za-z0-9_]+")

Step = Callable[[str, Path], None]


def _no_step(name: str, path: Path) -> None:
    pass


def is_special(path: str | os.PathLike) -> bool:
    """Whether `path` exists and is neither a regular file nor a directory (a device such as
    /dev/null, a FIFO, a socket): it is written in place, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def temp_beside(path: str | os.PathLike) -> tuple[int, str]:
    """A new temporary file in the directory of `path` (so the rename never crosses a filesystem),
    open for writing, with the permissions of an ordinary new file: (fd, its path)."""
    target = Path(path)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}{TEMP_MARK}{os.getpid()}.", dir=str(target.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temp, 0o666 & ~umask)   # mkstemp makes it private
    return fd, temp


def fsync_directory(directory: str | os.PathLike) -> None:
    """Make the directory's entries (a rename, a new or removed file) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_into(temp: str | os.PathLike, target: str | os.PathLike, step: Step = _no_step) -> None:
    """Rename a written and fsynced temporary file over its target, then fsync the directory."""
    target = Path(target)
    step("rename", target)
    os.replace(temp, target)
    step("fsync-dir", target.parent)
    fsync_directory(target.parent)


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb", *, step: Step = _no_step) -> Iterator[IO[Any]]:
    """A file to write `path` with, whole or not at all: what the block writes lands in `path` only
    if the block ends without an exception (fsynced, renamed into place, the directory fsynced);
    otherwise the temporary file is removed and `path` is untouched. A special file is written in
    place. `mode` is "wb" or "w" (text in UTF-8)."""
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', not {mode!r}")
    target = Path(path)
    encoding = None if "b" in mode else "utf-8"
    if is_special(target):
        with open(target, mode, encoding=encoding) as special:
            yield special
        return
    step("write", target)
    fd, temp = temp_beside(target)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as fh:
            yield fh
            fh.flush()
            step("fsync", target)
            os.fsync(fh.fileno())
        replace_into(temp, target, step)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise


def write_atomic(path: str | os.PathLike, data: bytes | str, *, step: Step = _no_step) -> None:
    """Write `data` to `path` whole or not at all (see `atomic_file`)."""
    with atomic_file(path, "wb" if isinstance(data, bytes) else "w", step=step) as fh:
        fh.write(data)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0  # another user's live process (or a pid we cannot ask about): keep its file
    return True


def remove_stale_temps(directory: str | Path) -> list[Path]:
    """Remove the temporary files in `directory` whose writing process no longer runs (a process
    killed mid-write leaves one behind); returns what was removed. Never raises."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(str(directory)))
    except OSError:
        return removed
    for entry in entries:
        match = _TEMP_NAME.fullmatch(entry.name)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        try:
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            pass
    return removed

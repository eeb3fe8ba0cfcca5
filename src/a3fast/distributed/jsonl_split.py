"""A JSON Lines file of declarations dealt out to the shards that own its names, read in parallel.

Reading a fleet file is two steps, each run by every shard at once:

1. `read_share`: shard i reads the i-th of N byte ranges of the file (cut at line boundaries: a
   line belongs to the range that holds its first byte) and finds each line's agent name and
   namespace — by one pattern run over the whole range for the usual shape (`{"v":..., "agent":
   {"name": ..., "namespace": ...}`), by orjson for any other line — then sorts its lines into one
   part per owning shard (`owners.shard_of`): where each line lies in the file (offsets, not its
   bytes), its line number within the range, names and namespaces. Blank lines are dropped (a
   fleet ignores them); a line whose name cannot be found goes to shard 0, whose reader reports
   its problem.
2. Each shard reads the lines of the parts it owns straight from the file (`share_text`), in
   range order (so in file order), with the compiled reader (`Fleet.extend_jsonl`), and answers
   with problems under the file's line numbers, or with its names; the coordinator never sees a
   declaration, and no line's bytes pass between processes.

When the shards cannot all reach the file by its path (`same_file` tells, from its size and
modification time), the coordinator reads the byte ranges itself (`read_range`) and puts each in
Ray's object store as bytes; step 1 deals a range's bytes (`deal`) and each Share then carries its
lines' bytes (`with_text`), which step 2 joins (`shares_text`) in place of reading the file.

The pattern vouches only for an agent object of exactly a name and a namespace, and a line with one
namespace member (no second `agent` object): any other line — a repeated key among them, whose last
value a JSON reader keeps — is read by orjson, as one Fleet reads it. The name found in step 1 is
checked against the reader's in step 2 (`names_agree`), so a line that would still fool the pattern
is a problem of its line, never an agent on the wrong shard.
"""
from __future__ import annotations

import hashlib
import mmap
import os
import re
from itertools import repeat
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import orjson

from ..errors import Problem
from ..framing import blank
from .owners import shard_of

__all__ = ["Share", "range_start", "read_range", "deal", "read_share", "with_text", "share_text",
           "shares_text", "same_file", "file_line", "names_agree"]

#: The usual shape of a declaration line, matched at a line start within a whole byte range: `v`
#: (optional) first, then the agent object, its name and namespace and nothing else (no repeated key
#: in it: a JSON reader keeps a repeated key's last value, which the pattern would not). JSON
#: whitespace inside a line is space, tab or CR; names and namespaces hold no newline.
_USUAL_IN_RANGE = re.compile(
    rb'[ \t\r]*\{[ \t\r]*(?:"v"[ \t\r]*:[ \t\r]*"[^"\\\n]*"[ \t\r]*,[ \t\r]*)?"agent"[ \t\r]*:[ \t\r]*\{'
    rb'[ \t\r]*"name"[ \t\r]*:[ \t\r]*"([^"\\\n]*)"[ \t\r]*,[ \t\r]*"namespace"[ \t\r]*:[ \t\r]*"([^"\\\n]*)"'
    rb'[ \t\r]*\}')
_NAMESPACE_MEMBER = b'"namespace"'
_LINE_AT = re.compile(r"^line (\d+): ")
_SCAN = 1 << 16


@dataclass
class Share:
    """The lines of one byte range that one shard owns, in file order."""

    starts: np.ndarray         # each line's first byte in the file
    ends: np.ndarray           # the end of each line's bytes in the file (its newline excluded)
    lines: np.ndarray          # each line's 0-based number within its range
    names: list[str]
    namespaces: list[str]
    #: the lines' bytes, each ending in a newline, when the share travels without the file
    text: bytes | None = None


def range_start(fh, size: int, part: int, parts: int) -> int:
    """Where byte range `part` of `parts` begins: the first line start at or after its cut."""
    cut = size * part // parts
    if cut <= 0:
        return 0
    if cut >= size:
        return size
    fh.seek(cut - 1)
    at = cut - 1
    while block := fh.read(_SCAN):
        eol = block.find(b"\n")
        if eol >= 0:
            return at + eol + 1
        at += len(block)
    return size


def _name_of(line: bytes) -> tuple[str, str] | None:
    """A line's agent name and namespace read by orjson, or None when the line has none (its
    reader says why)."""
    try:
        agent = orjson.loads(line).get("agent")
        name, namespace = agent.get("name"), agent.get("namespace")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    if isinstance(name, str) and isinstance(namespace, str):
        return name, namespace
    return None


def read_range(path: str, part: int, parts: int) -> tuple[int, bytes]:
    """Byte range `part` of `parts` of the file at `path`: where it begins, and its bytes."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        start = range_start(fh, size, part, parts)
        stop = range_start(fh, size, part + 1, parts)
        fh.seek(start)
        return start, fh.read(stop - start)


def same_file(path: str, size: int, mtime_ns: int) -> bool:
    """Whether `path` names, here, a file of this size and modification time (what another
    process's `os.stat` of its path found): the cheap test that the file is shared."""
    try:
        found = os.stat(path)
    except OSError:
        return False
    return found.st_size == size and found.st_mtime_ns == mtime_ns


def read_share(path: str, part: int, parts: int, shards: int) -> tuple[int, list[Share]]:
    """Byte range `part` of `parts` of the file at `path`, dealt out: how many lines the range
    holds (blank ones too: the next range's line numbers start after them) and one Share per
    shard."""
    return deal(*read_range(path, part, parts), shards)


def deal(start: int, data: bytes, shards: int) -> tuple[int, list[Share]]:
    """A byte range's bytes (`data`, beginning at byte `start` of the file) dealt out, as
    `read_share` does."""
    breaks = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    begins = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [len(data)]))
    if len(begins) and begins[-1] == len(data):
        begins, ends = begins[:-1], ends[:-1]     # the range's last newline ends its last line
    count = len(begins)
    owner = np.zeros(count, dtype=np.int64)
    names: list[str] = [""] * count
    spaces: list[str] = [""] * count
    dealt = np.zeros(count, dtype=bool)     # a line with an owner (blank lines get none)
    # the usual shape, matched at each line start within the range's bytes (no line copied)
    begin_list, end_list = begins.tolist(), ends.tolist()
    usual, blake2b, from_bytes = _USUAL_IN_RANGE.match, hashlib.blake2b, int.from_bytes
    matched = [(k, found) for k, found in enumerate(map(usual, repeat(data), begin_list, end_list))
               if found is not None]
    # one namespace member in each such line (no second "agent" object a JSON reader would keep):
    # each holds at least one, so the range's count tells, unless other lines hold some too
    single = data.count(_NAMESPACE_MEMBER) == len(matched)
    for k, found in matched:
        if not single and data.count(_NAMESPACE_MEMBER, begin_list[k], end_list[k]) != 1:
            continue
        raw = found.group(1)
        try:
            names[k], spaces[k] = raw.decode("utf-8"), found.group(2).decode("utf-8")
        except UnicodeDecodeError:
            continue
        owner[k] = from_bytes(blake2b(raw, digest_size=8).digest(), "little") % shards
        dealt[k] = True
    for k in np.flatnonzero(~dealt).tolist():
        line = data[begin_list[k]:end_list[k]]
        if blank(line):
            continue
        named = _name_of(line)
        if named is not None:
            names[k], spaces[k] = named
            owner[k] = shard_of(named[0], shards)
        dealt[k] = True
    shares = []
    for j in range(shards):
        mine = np.flatnonzero(dealt & (owner == j))
        ks = mine.tolist()
        shares.append(Share(begins[mine] + start, ends[mine] + start, mine,
                            [names[k] for k in ks], [spaces[k] for k in ks]))
    return count, shares


def with_text(shares: Sequence[Share], start: int, data: bytes) -> list[Share]:
    """`shares` of the byte range `data` (beginning at byte `start` of the file), each with its
    lines' bytes, so that it needs no file."""
    out = []
    for share in shares:
        lines = [data[a - start:b - start] for a, b in zip(share.starts.tolist(), share.ends.tolist())]
        text = b"\n".join(lines) + b"\n" if lines else b""
        out.append(Share(share.starts, share.ends, share.lines, share.names, share.namespaces, text))
    return out


def shares_text(shares: Sequence[Share]) -> bytes:
    """The lines the shares carry (`with_text`), in order: `share_text` without the file."""
    return b"".join(share.text or b"" for share in shares)


def share_text(path: str, shares: Sequence[Share]) -> bytes:
    """The lines of `shares`, read from the file at `path`, in order, each ending in a newline
    (the compiled reader's input)."""
    if not any(len(share.starts) for share in shares):
        return b""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
        lines = [view[a:b] for share in shares for a, b in zip(share.starts.tolist(), share.ends.tolist())]
    return b"\n".join(lines) + b"\n"


def file_line(problem: Problem, numbers: np.ndarray) -> tuple[int, Problem]:
    """A problem of the joined shares (`line K: ...`, K counting their lines) under the file's line
    number; `numbers` holds each joined line's 1-based number in the file."""
    found = _LINE_AT.match(problem.path)
    if found is None:
        return 0, problem
    line = int(numbers[int(found.group(1)) - 1])
    return line, Problem(f"line {line}: {problem.path[found.end():]}", problem.expected, problem.found)


def names_agree(read: Sequence[str], found: Sequence[str], numbers: np.ndarray) -> Problem | None:
    """The reader's names in join order against the names found while dealing the lines (first
    appearances): None when they agree, else the problem of the first line where they part."""
    firsts: dict[str, int] = {}
    for k, name in enumerate(found):
        firsts.setdefault(name, k)
    if list(firsts) == list(read):
        return None
    for k, (expected, name) in enumerate(zip(firsts, read)):
        if expected != name:
            break
    else:
        k = min(len(firsts), len(read))
    at = list(firsts.values())[k] if k < len(firsts) else len(found) - 1
    return Problem(f"line {int(numbers[at])}: $.agent", "one name and one namespace member",
                   "a repeated key (the line reads differently to a JSON reader than it looks)")

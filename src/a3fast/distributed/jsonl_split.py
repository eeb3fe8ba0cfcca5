"""A JSON Lines file of declarations dealt out to the shards that own its names, read in parallel.

Reading a fleet file is two steps, each run by every shard at once:

1. `read_share`: shard i reads the i-th of N byte ranges of the file (cut at line boundaries: a
   line belongs to the range that holds its first byte) and finds each line's agent name and
   namespace — by a pattern for the usual shape (`{"v":..., "agent": {"name": ..., "namespace":
   ...}`), by orjson for any other — then sorts its lines into one part per owning shard
   (`owners.shard_of`): the lines' bytes, their line numbers within the range, names and
   namespaces. Blank lines are dropped (a fleet ignores them); a line whose name cannot be found
   goes to shard 0, whose reader reports its problem.
2. Each shard reads the parts it owns, in range order (so in file order), with the compiled reader
   (`Fleet.extend_jsonl`), and answers with problems under the file's line numbers, or with its
   names; the coordinator never sees a declaration.

The name found in step 1 is checked against the reader's in step 2 (`names_agree`), so a line that
fools the pattern (a repeated key) is a problem of its line, never an agent on the wrong shard.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import orjson

from ..errors import Problem
from .owners import shard_of

__all__ = ["Share", "range_start", "read_share", "file_line", "names_agree"]

#: The usual shape of a declaration line: `v` (optional) first, then the agent's name and namespace.
_USUAL = re.compile(rb'\s*\{\s*(?:"v"\s*:\s*"[^"\\]*"\s*,\s*)?"agent"\s*:\s*\{\s*"name"\s*:\s*"([^"\\]*)"'
                    rb'\s*,\s*"namespace"\s*:\s*"([^"\\]*)"')
_LINE_AT = re.compile(r"^line (\d+): ")
_SCAN = 1 << 16


@dataclass
class Share:
    """The lines of one byte range that one shard owns, in file order."""

    text: bytes                # the lines, each ending in a newline
    lines: np.ndarray          # each line's 0-based number within its range
    names: list[str]
    namespaces: list[str]


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


def read_share(path: str, part: int, parts: int, shards: int) -> tuple[int, list[Share]]:
    """Byte range `part` of `parts` of the file at `path`, dealt out: how many lines the range
    holds (blank ones too: the next range's line numbers start after them) and one Share per
    shard."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        start = range_start(fh, size, part, parts)
        stop = range_start(fh, size, part + 1, parts)
        fh.seek(start)
        data = fh.read(stop - start)
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()   # the range's last newline ends its last line
    texts: list[list[bytes]] = [[] for _ in range(shards)]
    numbers: list[list[int]] = [[] for _ in range(shards)]
    names: list[list[str]] = [[] for _ in range(shards)]
    spaces: list[list[str]] = [[] for _ in range(shards)]
    usual, blake2b, from_bytes = _USUAL.match, hashlib.blake2b, int.from_bytes
    for number, line in enumerate(lines):
        found = usual(line)
        if found is not None and line.count(b'"namespace"') == 1:
            # one namespace member in the line: no second "agent" object a JSON reader would keep
            raw = found.group(1)
            try:
                name, namespace = raw.decode("utf-8"), found.group(2).decode("utf-8")
            except UnicodeDecodeError:
                named = _name_of(line)
            else:
                owner = from_bytes(blake2b(raw, digest_size=8).digest(), "little") % shards
                texts[owner].append(line)
                numbers[owner].append(number)
                names[owner].append(name)
                spaces[owner].append(namespace)
                continue
        elif not line.strip():
            continue
        else:
            named = _name_of(line)
        owner = shard_of(named[0], shards) if named is not None else 0
        texts[owner].append(line)
        numbers[owner].append(number)
        names[owner].append(named[0] if named is not None else "")
        spaces[owner].append(named[1] if named is not None else "")
    shares = [Share(b"\n".join(texts[j]) + b"\n" if texts[j] else b"", np.array(numbers[j], dtype=np.int64),
                    names[j], spaces[j]) for j in range(shards)]
    return len(lines), shares


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

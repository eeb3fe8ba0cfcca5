"""§3 declarations from one input — a JSON array or JSON Lines, given as a path, bytes or a binary
stream — with every problem a `Problem` named by where it is: `line 4: $.agent.name` in JSON
Lines, `$[3].agent.name` in an array, `$` for an input that is neither.

Where each document begins and ends is `a3fast.framing`'s, the one framing of every input; this
module sits above it and above the fleet:

- `load_fleet` reads §3 declarations into a `Fleet` through the fleet's bulk reader
  (`Fleet.extend_jsonl`, compiled in `a3fast._ingest`): one pass over the bytes, no dict and no
  `Declaration` kept per agent, and exactly the problems `Fleet.load_jsonl` names. A JSON array is
  cut into its elements by the framing and handed to the same reader as lines.
- `read_declarations` parses each declaration of the input into a `Declaration`, for a caller
  that needs them one by one.
"""
from __future__ import annotations

import os
import re
from typing import Any

from .declaration_codec import PACK_FROM_BYTES
from .errors import Problem, SchemaError
from .fleet import Fleet
from .framing import ARRAY, AUTO, EMPTY, Item, Source, framed, is_bytes, iter_documents, source_name, split_array
from .schema import Declaration, parse_declaration

__all__ = ["read_declarations", "load_fleet", "extend_fleet"]


def read_declarations(source: Source, *, form: str = AUTO
                      ) -> tuple[list[tuple[str, Declaration]], list[Problem]]:
    """([(where, declaration)], problems): the §3 declarations of the input, parsed one by one
    (for a caller that needs each `Declaration`; `load_fleet` builds a fleet without them)."""
    declarations: list[tuple[str, Declaration]] = []
    problems: list[Problem] = []
    for item in iter_documents(source, form=form):
        if item.problems:
            problems += item.rooted()
            continue
        try:
            declarations.append((item.where, parse_declaration(item.value)))
        except SchemaError as exc:
            problems += Item(item.where, item.line, None, tuple(exc.problems)).rooted()
    return declarations, problems


# -- declarations into a fleet, through its bulk reader -------------------------------------------------

def load_fleet(source: Source, engine: str | None = None, *, form: str = AUTO, name: str | None = None,
               **options: Any) -> Fleet:
    """A fleet of the input's §3 declarations, read by the fleet's bulk reader in one pass (see the
    module's docstring). SchemaError lists every problem, each named by line (or index) and JSON
    path, under `name` (default: `source_name`); OSError when the input cannot be read. `options`
    go to `Fleet`."""
    fleet = Fleet(engine, **options)
    problems = extend_fleet(fleet, source, form=form)
    if problems:
        raise SchemaError(problems, name if name is not None else source_name(source))
    _return_freed_memory()
    return fleet


def _return_freed_memory() -> None:
    """Hand the heap the load's passing buffers used (chunks, batch columns) back to the system.
    glibc keeps freed blocks for reuse, so without this they stay in the process's RSS under
    whatever it builds next (a placement's §6 record over every candidate is tens of MB at
    200,000 agents); about 10 MiB at that size. Elsewhere there is nothing to do."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def extend_fleet(fleet: Fleet, source: Source, *, form: str = AUTO) -> list[Problem]:
    """Add the input's declarations to `fleet` through `Fleet.extend_jsonl` and return the problems
    of the declarations left out (every one that parsed is added, so a caller that must add all or
    nothing builds a fresh fleet and drops it when problems come back, as `load_fleet` does)."""
    framing = framed(source, form=form)
    try:
        if framing.form == EMPTY:
            return []
        if framing.form == ARRAY:
            return _extend_from_array(fleet, framing.whole())
        if is_bytes(source):
            return fleet.extend_jsonl(bytes(source), on_error="skip")  # type: ignore[arg-type]  # bytes-like
        if isinstance(source, (str, os.PathLike)) and os.path.isfile(source) \
                and os.path.getsize(source) >= PACK_FROM_BYTES:
            # large enough to be kept packed: the bulk reader sizes and reads the file itself
            framing.close()
            return fleet.extend_jsonl(source, on_error="skip")
        # the rest goes to the bulk reader as one stream: one pass, one vocabulary of declared
        # values and one batch for the whole input, read 2 MiB of whole lines at a time
        # (the stream starts at the first non-blank line, numbered as the input numbers it)
        return fleet.extend_jsonl(framing.stream(), on_error="skip", first_line=framing.first_line)
    finally:
        framing.close()


def _extend_from_array(fleet: Fleet, data: bytes) -> list[Problem]:
    """A JSON array of declarations: the framing cuts it into its elements' bytes, and they go to
    the bulk reader as lines; `line k+1` of its problems is `$[k]` here."""
    elements = split_array(data)
    del data
    if elements and isinstance(elements[0], Problem):
        return list(elements)  # the problems of an input that is no array
    # a raw line end can stand only between tokens, where a space means the same
    lines = b"\n".join(raw.replace(b"\r", b" ").replace(b"\n", b" ") for raw in elements)  # type: ignore[union-attr]
    del elements
    return [_at_index(p) for p in fleet.extend_jsonl(lines, on_error="skip")]


_LINE_ROOT = re.compile(r"line (\d+): \$")


def _at_index(problem: Problem) -> Problem:
    """`line k+1: $...` of the lines an array was cut into is `$[k]...` of the array."""
    path = _LINE_ROOT.sub(lambda m: f"$[{int(m.group(1)) - 1}]", problem.path, count=1)
    return Problem(path, problem.expected, problem.found)

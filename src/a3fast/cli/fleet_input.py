"""Reading a fleet and requirements from files for the CLI, with every problem named precisely and
a file of another kind told in one line (`a3fast.files.require_kind`)."""
from __future__ import annotations

from typing import Any

from .. import document_reader
from ..errors import SchemaError
from ..files import cannot_read, input_source, read_json, require_kind
from ..fleet import Fleet
from ..schema import Declaration, Requirements, parse_requirements
from .common import BadInput


def read_declarations(path: str) -> list[tuple[str, Declaration]]:
    """The §3 declarations of a JSON array or JSON Lines file, each with its place in the file;
    BadInput lists every problem (file, line or index, JSON path)."""
    require_kind(path, "declarations")
    try:
        parsed, problems = document_reader.read_declarations(input_source(path))
    except OSError as exc:
        raise cannot_read(path, exc) from None
    if problems:
        raise BadInput([f"{path}: {p}" for p in problems])
    return parsed


def load_fleet(path: str, engine: str | None, *, allow_empty: bool = True) -> Fleet:
    """A fleet from a JSON array or JSON Lines file of §3 declarations, read by the fleet's bulk
    reader (a3fast.document_reader.load_fleet); BadInput lists every problem (file, line or index,
    JSON path) and nothing is half-built. A file of another kind, or an empty one unless
    `allow_empty`, is one line."""
    require_kind(path, "declarations", allow_empty=allow_empty)
    try:
        return document_reader.load_fleet(input_source(path), engine, name=path)
    except OSError as exc:
        raise cannot_read(path, exc) from None
    except SchemaError as exc:
        raise BadInput(exc.lines()) from None
    except ValueError as exc:  # an engine this build does not have
        raise BadInput(str(exc)) from None


def load_requirements(path: str) -> Requirements:
    require_kind(path, "requirements")
    doc: Any = read_json(path)
    try:
        return parse_requirements(doc)
    except SchemaError as exc:
        raise BadInput([f"{path}: {p}" for p in exc.problems]) from None

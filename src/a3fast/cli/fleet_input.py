"""Reading a fleet and requirements from files for the CLI, with every problem named precisely."""
from __future__ import annotations

from typing import Any

from .. import document_reader
from ..errors import SchemaError
from ..fleet import Fleet
from ..schema import Declaration, Requirements, parse_requirements
from .common import BadInput, cannot_read, input_source, read_json


def read_declarations(path: str) -> list[tuple[str, Declaration]]:
    """The §3 declarations of a JSON array or JSON Lines file, each with its place in the file;
    BadInput lists every problem (file, line or index, JSON path)."""
    try:
        parsed, problems = document_reader.read_declarations(input_source(path))
    except OSError as exc:
        raise cannot_read(path, exc) from None
    if problems:
        raise BadInput([f"{path}: {p}" for p in problems])
    return parsed


def load_fleet(path: str, engine: str | None) -> Fleet:
    """A fleet from a JSON array or JSON Lines file of §3 declarations, read by the fleet's bulk
    reader (a3fast.document_reader.load_fleet); BadInput lists every problem (file, line or index,
    JSON path) and nothing is half-built."""
    try:
        return document_reader.load_fleet(input_source(path), engine, name=path)
    except OSError as exc:
        raise cannot_read(path, exc) from None
    except SchemaError as exc:
        raise BadInput(exc.lines()) from None
    except ValueError as exc:  # an engine this build does not have
        raise BadInput(str(exc)) from None


def load_requirements(path: str) -> Requirements:
    doc: Any = read_json(path)
    try:
        return parse_requirements(doc)
    except SchemaError as exc:
        raise BadInput([f"{path}: {p}" for p in exc.problems]) from None

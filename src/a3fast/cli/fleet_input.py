"""Reading a fleet and requirements from files for the CLI, with every problem named precisely."""
from __future__ import annotations

from typing import Any

from ..errors import FleetError, SchemaError
from ..fleet import Fleet
from ..schema import Declaration, Requirements, parse_declaration, parse_requirements
from .common import BadInput, read_json, read_json_documents, rooted


def read_declarations(path: str) -> list[tuple[str, Declaration]]:
    """The §3 declarations of a JSON array or JSON Lines file, each with its place in the file;
    BadInput lists every problem (file, line or index, JSON path)."""
    documents, problems = read_json_documents(path, strict=False)
    parsed: list[tuple[str, Declaration]] = []
    for prefix, doc in documents:
        try:
            parsed.append((prefix, parse_declaration(doc)))
        except SchemaError as exc:
            problems += [f"{path}: {rooted(p, prefix)}" for p in exc.problems]
    if problems:
        raise BadInput(problems)
    return parsed


def load_fleet(path: str, engine: str | None) -> Fleet:
    """A fleet from a JSON array or JSON Lines file of §3 declarations; BadInput lists every
    problem (file, line or index, JSON path) and nothing is half-built."""
    parsed = read_declarations(path)
    problems: list[str] = []
    try:
        fleet = Fleet(engine=engine)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    for prefix, decl in parsed:
        try:
            fleet.add(decl)
        except FleetError as exc:
            problems.append(f"{path}: {prefix.rstrip('$').rstrip(': ') or '$'}: {exc}")
    if problems:
        raise BadInput(problems)
    return fleet


def load_requirements(path: str) -> Requirements:
    doc: Any = read_json(path)
    try:
        return parse_requirements(doc)
    except SchemaError as exc:
        raise BadInput([f"{path}: {p}" for p in exc.problems]) from None

"""Reading the files an import is given: JSON (one document, an array of them, or JSON Lines) and
multi-document YAML, with errors that name the file and the place in it.

Kubernetes manifests are hostile input. YAML is read with PyYAML's safe loader only (no Python
objects are ever constructed), and every value taken from a manifest is copied into plain JSON types
under a budget, because YAML aliases let a file of a few hundred bytes describe a structure of
billions of nodes (or a cycle).
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from ..framing import LINES, iter_lines, read_documents
from ..errors import Problem, SchemaError, describe, json_path
from ..schema import loads

__all__ = ["Document", "expand_paths", "json_documents", "usable_json_documents", "json_document",
           "yaml_documents", "to_json", "MAX_NODES"]

#: Most values one declaration taken from a manifest may expand to (an alias counts each time it is
#: used). Only declarations are copied, never whole manifests, so this is generous.
MAX_NODES = 100_000
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Document:
    """One document of a file: `path` is its root ("$", "$[2]", "line 4: $", "document 3: $")."""

    source: str
    path: str
    value: Any


def expand_paths(paths: Iterable[str], suffixes: tuple[str, ...]) -> list[str]:
    """Files named directly, and the files with one of `suffixes` inside named directories
    (sorted, not recursive). '-' (standard input) is kept as is."""
    out: list[str] = []
    for path in paths:
        if path != "-" and os.path.isdir(path):
            # a link to nowhere is kept, to be told as a file that cannot be read, as when named
            found = sorted(str(p) for p in Path(path).iterdir()
                           if (p.is_file() or p.is_symlink() and not p.exists()) and p.name.lower().endswith(suffixes))
            out += found
        else:
            out.append(path)
    return out


def json_document(data: bytes, source: str) -> Document:
    """The whole file as one JSON document (an MCP listing that is a bare array is one listing)."""
    return Document(source, "$", loads(data, source))


def json_documents(data: bytes, source: str) -> list[Document]:
    """A JSON object (one document), a JSON array (one document per element) or JSON Lines (read
    by a3fast.framing, every problem at its line); SchemaError if any of it cannot be read."""
    documents, problems = usable_json_documents(data, source)
    if problems:
        raise SchemaError(problems, source)
    return documents


def usable_json_documents(data: bytes, source: str) -> tuple[list[Document], list[Problem]]:
    """`json_documents`, keeping what can be read: the documents of the JSON Lines that parse, and
    the problem of each line that does not (one broken line of a thousand cards is one skipped
    item). A file that is one broken JSON document is one problem and no document."""
    try:
        value = loads(data, source)
    except SchemaError as whole:
        # JSON Lines when its first line is a document, or when that line is a broken object and
        # the next an object: a pretty-printed object's second line is a member, never a document,
        # and an array (a card a line, a comma forgotten) begins with "[" and stays one document
        lines = list(itertools.islice(iter_lines(data), 2))
        if len(lines) < 2 or not (_parses(lines[0][1]) or (lines[0][1].lstrip().startswith(b"{")
                                                            and isinstance(_parsed(lines[1][1]), dict))):
            return [], list(whole.problems)  # one broken JSON document, not JSON Lines: one problem
        documents, problems = read_documents(data, form=LINES)
        return [Document(source, where, value) for where, value in documents], list(problems)
    if isinstance(value, list):
        return [Document(source, f"$[{i}]", item) for i, item in enumerate(value)], []
    return [Document(source, "$", value)], []


def _parses(line: bytes) -> bool:
    try:
        loads(line)
    except SchemaError:
        return False
    return True


def _parsed(line: bytes) -> Any:
    try:
        return loads(line)
    except SchemaError:
        return None


def yaml_documents(data: bytes, source: str) -> tuple[list[Document], list[Problem]]:
    """Every document of a YAML stream (JSON is YAML too), read with the safe loader.

    Returns the documents read and, if the stream breaks, the problem that stopped it: documents
    before a syntax error are still usable. Empty documents (`---` alone) are left out.
    """
    docs: list[Document] = []
    try:
        for i, value in enumerate(yaml.load_all(data, Loader=_LOADER), 1):
            if value is not None:
                docs.append(Document(source, f"document {i}: $", value))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else f"document {len(docs) + 1}"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        # PyYAML's own words often begin "found ...", which the problem's line says already
        return docs, [Problem(where, "valid YAML", str(problem).removeprefix("found "))]
    except RecursionError:
        return docs, [Problem(f"document {len(docs) + 1}", "YAML nested to a reasonable depth",
                              "nesting too deep to read")]
    except ValueError as exc:  # a scalar the safe loader's constructors refuse (an integer of
        # more digits than Python converts, a date out of range)
        found = " ".join(str(exc).split())[:200]
        if "integer string conversion" in found:    # Python's own advice is no help to the caller
            found = "an integer of more than 4,300 digits"
        return docs, [Problem(f"document {len(docs) + 1}", "values YAML can read", found)]
    return docs, []


def to_json(value: Any, path: str = "$", budget: int = MAX_NODES) -> Any:
    """A copy of a YAML value in plain JSON types, or SchemaError saying where it is not JSON.

    YAML has timestamps, binary, sets, non-string keys and non-finite numbers; a declaration is
    JSON (§3), so each of these is an error at its path rather than something to coerce. At most
    `budget` values are copied, which bounds alias bombs and cycles.
    """
    remaining = [budget]
    problems: list[Problem] = []

    def copy(node: Any, where: str) -> Any:
        remaining[0] -= 1
        if remaining[0] < 0:
            raise _OverBudget(where)
        if node is None or isinstance(node, (bool, str, int)):
            return node
        if isinstance(node, float):
            if math.isfinite(node):
                return node
            problems.append(Problem(where, "a finite number", repr(node)))
            return None
        if isinstance(node, list):
            return [copy(item, json_path(where, i)) for i, item in enumerate(node)]
        if isinstance(node, dict):
            out = {}
            for key, item in node.items():
                if not isinstance(key, str):
                    problems.append(Problem(where, "string keys (JSON objects have no other kind)",
                                            f"key {describe(key)}"))
                    continue
                out[key] = copy(item, json_path(where, key))
            return out
        problems.append(Problem(where, "a JSON value (quote it in YAML to keep it a string)",
                                f"YAML {type(node).__name__}"))
        return None

    try:
        result = copy(value, path)
    except _OverBudget as over:
        raise SchemaError([Problem(over.where, f"at most {budget} values in one object (YAML "
                                               f"aliases can expand a small file without bound)",
                                   "more")]) from None
    except RecursionError:
        raise SchemaError([Problem(path, "a value nested to a reasonable depth",
                                   "nesting too deep (or a YAML alias cycle)")]) from None
    if problems:
        raise SchemaError(problems)
    return result


class _OverBudget(Exception):
    def __init__(self, where: str):
        super().__init__(where)
        self.where = where

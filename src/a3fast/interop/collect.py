"""Declarations from many sources gathered into one set a fleet will accept.

Every declaration an importer makes passes through here, and here it is parsed with
`a3fast.schema.parse_declaration`, so nothing invalid is ever emitted. The set follows the fleet's
rules (docs/design.md, reading 3): a later declaration for the same `(namespace, name)` replaces the earlier
one, as `Fleet.add` does; a name already held by another namespace is skipped, since a fleet would
refuse it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import orjson

from ..errors import Problem, SchemaError
from ..fleet.domain import namespace_conflict
from ..schema import parse_declaration
from .report import AgentEntry, ImportReport, under

__all__ = ["DeclarationSet", "ImportResult"]


@dataclass
class _Held:
    doc: dict[str, Any]
    namespace: str
    source: str
    path: str


class DeclarationSet:
    """An ordered set of valid declarations keyed by agent name, reporting into `report`."""

    def __init__(self, report: ImportReport):
        self.report = report
        self._held: dict[str, _Held] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, name: object) -> bool:
        return name in self._held

    def get(self, name: str) -> dict[str, Any] | None:
        held = self._held.get(name)
        return held.doc if held else None

    def declarations(self) -> list[dict[str, Any]]:
        return [held.doc for held in self._held.values()]

    def offer(self, doc: dict[str, Any], source: str, path: str, *,
              supplied: Iterable[str] = (), missing: Iterable[tuple[str, str]] = (),
              detail: dict[str, Any] | None = None, made: bool = True) -> bool:
        """Add `doc` if it is a valid declaration that fits the set; else report why it was skipped.

        `supplied` names the fields the caller supplied for it and `missing` the fields that could
        not be derived, with the reason; both are recorded only if the declaration is kept.
        `made=False` keeps a declaration the caller passed in without listing it as made here.
        """
        try:
            decl = parse_declaration(doc)
        except SchemaError as exc:
            for problem in exc.problems:
                self.report.skip(source, under(path, problem.path),
                                 f"expected {problem.expected}, found {problem.found}")
            return False
        try:
            # What cannot be written back out cannot be put in a fleet or a trace either.
            orjson.dumps(doc)
        except orjson.JSONEncodeError as exc:
            self.report.skip(source, path, f"expected a declaration that can be written as JSON, "
                                           f"found one that cannot ({exc})")
            return False
        name, namespace = decl.agent.name, decl.agent.namespace
        earlier = self._held.get(name)
        conflict = namespace_conflict(name, earlier.namespace if earlier is not None else None, namespace)
        if conflict is not None:
            assert earlier is not None
            self.report.skip(source, path, f"{conflict}; the name was read from {earlier.source} {earlier.path}")
            return False
        if earlier is not None:
            self.report.note("replaced", source, path, f"replaces the declaration of agent {name!r} read from "
                                           f"{earlier.source} {earlier.path} (same namespace and name)")
            self.report.forget_agent(name)
            self.report.agents.pop((namespace, name), None)
        self._held[name] = _Held(dict(doc), namespace, source, path)
        if made:
            self.report.agents[(namespace, name)] = AgentEntry(name, namespace, source, path,
                                                               dict(detail or {}))
            for what in supplied:
                self.report.supply(what, name)
            for what, why in missing:
                self.report.missing(what, name, why)
        return True

    def keep(self, doc: Any, source: str, path: str) -> None:
        """Hold a declaration the caller passed in (an importer's fleet), to be written back out as
        given: one the set would skip is a SchemaError naming `source`, the place and why, since
        dropping a line of the caller's own file would lose an agent without a word."""
        try:
            decl = parse_declaration(doc)
        except SchemaError as exc:
            raise SchemaError([Problem(under(path, p.path), p.expected, p.found) for p in exc.problems],
                              source) from None
        earlier = self._held.get(decl.agent.name)
        conflict = namespace_conflict(decl.agent.name, earlier.namespace if earlier is not None else None,
                                      decl.agent.namespace)
        if conflict is not None:
            assert earlier is not None
            raise SchemaError([Problem(path, f"an agent name no other namespace holds ({earlier.path} "
                                             f"declares it in namespace {earlier.namespace!r})",
                                       f"{decl.agent.name!r} in namespace {decl.agent.namespace!r}")],
                              source)
        self.offer(doc, source, path, made=False)

    def replace_doc(self, name: str, doc: dict[str, Any]) -> None:
        """Swap in a changed declaration for an agent already held (it must still parse)."""
        parse_declaration(doc)
        self._held[name].doc = dict(doc)


@dataclass
class ImportResult:
    """What an import produced: declarations ready for a fleet (JSON Lines, one per line), the
    report, and for MCP listings the draft authority contracts and host mappings, when asked for."""

    declarations: list[dict[str, Any]]
    report: ImportReport
    contracts: list[dict[str, Any]] = field(default_factory=list)
    mappings: list[dict[str, Any]] = field(default_factory=list)
    #: whether anything usable was read from the sources (a declaration made, a tool listed);
    #: the CLI exits 2 when not
    usable: bool = False

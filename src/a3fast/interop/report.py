"""The import report: what was made, what the caller supplied, what could not be derived, and
what was skipped and why.

An importer never invents a field. Everything in a declaration either came from the source
document, or was supplied by the caller (and is listed here under `supplied`), or is absent (and
is listed under `not_derived` with the reason it cannot come from the source). Items the importer
could not use are `skipped`, each with the file, the JSON path and a reason a person can act on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Skipped", "Note", "AgentEntry", "ImportReport", "under"]


def under(prefix: str, path: str) -> str:
    """A JSON path inside a document, rooted at the document's place in its file.

    `prefix` ends in `$` ("$", "$[2]", "line 4: $", "document 3: $"); `path` starts with `$`.
    """
    return prefix + path[1:] if path.startswith("$") else f"{prefix} {path}"


@dataclass(frozen=True)
class Skipped:
    """An item (a file, a document, a skill, a tool) that did not become part of the output."""

    source: str
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: {self.path}: {self.reason}"

    def to_dict(self) -> dict[str, str]:
        return {"source": self.source, "path": self.path, "reason": self.reason}


@dataclass(frozen=True)
class Note:
    """Something a caller should know about an item that *was* used (a normalised id, a card that
    may be incomplete, a listing whose last page names a next one). `topic` groups notes of one
    kind in the short report."""

    topic: str
    source: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.path}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"topic": self.topic, "source": self.source, "path": self.path, "message": self.message}


@dataclass
class AgentEntry:
    """One agent in the output: where its declaration came from and what the source said."""

    name: str
    namespace: str
    source: str
    path: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"agent": {"name": self.name, "namespace": self.namespace},
                "source": self.source, "path": self.path, **self.detail}


class ImportReport:
    """Collects what one import did; `lines()` is the short text, `to_dict()` the full record."""

    def __init__(self, kind: str):
        self.kind = kind
        self._sources: dict[str, None] = {}
        self.agents: dict[tuple[str, str], AgentEntry] = {}
        # Agent names are kept as ordered sets (dicts of None): a fleet has thousands of agents,
        # and each is recorded under several fields.
        self._supplied: dict[str, dict[str, None]] = {}
        self._not_derived: dict[str, tuple[str, dict[str, None]]] = {}
        self.skipped: list[Skipped] = []
        self.notes: list[Note] = []
        #: counts of things read and deliberately left alone (not errors), e.g. objects without a
        #: declaration in a manifest
        self.counts: dict[str, int] = {}
        #: agents whose capabilities were derived from what a source publishes (skills), as opposed
        #: to declarations written by their authors: the ones an empty result is an error for
        self.derived: dict[str, None] = {}

    # -- recording ------------------------------------------------------------------------------
    def read(self, source: str) -> None:
        self._sources[source] = None

    def supply(self, what: str, agent: str) -> None:
        self._supplied.setdefault(what, {})[agent] = None

    def missing(self, what: str, agent: str, why: str) -> None:
        self._not_derived.setdefault(what, (why, {}))[1][agent] = None

    def skip(self, source: str, path: str, reason: str) -> None:
        self.skipped.append(Skipped(source, path, reason))

    def note(self, topic: str, source: str, path: str, message: str) -> None:
        self.notes.append(Note(topic, source, path, message))

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def forget_agent(self, agent: str) -> None:
        """Drop an agent from the supplied/not-derived lists (its declaration was not kept)."""
        for names in self._supplied.values():
            names.pop(agent, None)
        for _, names in self._not_derived.values():
            names.pop(agent, None)

    # -- reading --------------------------------------------------------------------------------
    @property
    def sources(self) -> list[str]:
        """The files read, in order."""
        return list(self._sources)

    @property
    def made(self) -> int:
        return len(self.agents)

    @property
    def supplied(self) -> dict[str, list[str]]:
        """Field -> the agents the caller supplied it for."""
        return {what: list(names) for what, names in self._supplied.items() if names}

    @property
    def not_derived(self) -> dict[str, tuple[str, list[str]]]:
        """Field -> (why the source cannot give it, the agents it is absent for)."""
        return {what: (why, list(names)) for what, (why, names) in self._not_derived.items() if names}

    def headline(self, outcome: str | None = None) -> str:
        """`import KIND: N agents made from M sources, K items skipped`, or with `outcome` (an
        import refused or that found nothing) that outcome instead of "made", so the first line
        never says something was made when nothing was written."""
        n = len(self._sources)
        files = f"{n} source{'s' if n != 1 else ''}" if any("://" in s or s.startswith("mcp ")
                                                         for s in self._sources) \
            else f"{n} file{'s' if n != 1 else ''}"
        skipped = f"{len(self.skipped)} item{'s' if len(self.skipped) != 1 else ''} skipped"
        if outcome is not None:
            return f"import {self.kind}: {outcome} ({files} given, {skipped})"
        agents = f"{self.made} agent{'s' if self.made != 1 else ''}"
        return f"import {self.kind}: {agents} made from {files}, {skipped}"

    def lines(self, shown: int = 5, outcome: str | None = None) -> list[str]:
        """A short report: a headline, who was supplied what, what was not derived, then notes
        grouped by topic and skipped items — at most `shown` of each group (to_dict has all)."""
        out = [self.headline(outcome)]
        out += [f"  {what}: {n}" for what, n in self.counts.items()]
        supplied = self.supplied
        if supplied:
            out.append("  supplied by the caller:")
            out += [f"    {what} — {_names(names)}" for what, names in supplied.items()]
        missing = self.not_derived
        if missing:
            out.append("  not derived:")
            out += [f"    {what} — {_names(names)}: {why}" for what, (why, names) in missing.items()]
        topics: dict[str, list[Note]] = {}
        for note in self.notes:
            topics.setdefault(note.topic, []).append(note)
        for topic, notes in topics.items():
            out.append(f"  {topic} ({len(notes)}):")
            out += _first(notes, shown)
        if self.skipped:
            out.append(f"  skipped ({len(self.skipped)}):")
            out += _first(self.skipped, shown * 4)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "sources": list(self.sources),
            "agents": [entry.to_dict() for entry in self.agents.values()],
            "counts": dict(self.counts),
            "supplied": self.supplied,
            "not_derived": {what: {"why": why, "agents": names}
                            for what, (why, names) in self.not_derived.items()},
            "notes": [note.to_dict() for note in self.notes],
            "skipped": [item.to_dict() for item in self.skipped],
        }


def _first(items: list[Any], shown: int) -> list[str]:
    lines = [f"    {item}" for item in items[:shown]]
    if len(items) > shown:
        lines.append(f"    … and {len(items) - shown} more (the full report lists every one)")
    return lines


def _names(names: list[str], shown: int = 3) -> str:
    """'3 agents: a, b, c' or '7 agents: a, b, c, +4 more' — short, whatever the fleet's size."""
    head = ", ".join(names[:shown])
    more = f", +{len(names) - shown} more" if len(names) > shown else ""
    return f"{len(names)} agent{'s' if len(names) != 1 else ''}: {head}{more}"

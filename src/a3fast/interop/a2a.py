"""A2A Agent Cards -> A3 declarations (A3 §8).

"An Agent Card's skills[].id maps to a capability name; the card has no version or clearance
concept. A runtime MAY derive a declaration's capabilities from a card and MUST source clearances
elsewhere." So from a card a3fast takes the agent's name and its skills; the namespace, each
capability's major version, clearances, residency and model come from the caller (`Supplied`) or
are reported as not derived. A card's own `version` is the agent's release, not a capability's
major version, and is never used as one.

Card shapes in use, told apart by their fields (a card's `protocolVersion` is reported as written,
since cards in the wild pair old numbers with new fields):

- `v1.0`    `supportedInterfaces: [{url, protocolBinding, protocolVersion}]`
- `v0.3`    `url` with `protocolVersion`, `preferredTransport` or `additionalInterfaces`
- `v0.2`    `url` alone
- `legacy`  `url` with the pre-0.2 `authentication: {schemes}` block
- `partial` no endpoint at all (a platform fills it in at deploy time)

A card that says an extended card exists (`capabilities.extendedAgentCard` in v1.0,
`supportsAuthenticatedExtendedCard` before it) may list skills this one does not: such an agent is
marked possibly incomplete.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import Problem, SchemaError, describe, json_path
from ..schema import is_identifier
from .collect import DeclarationSet, ImportResult
from .naming import normalise_identifier
from .report import ImportReport
from .sources import Document
from .supply import Supplied, _text_problem

__all__ = ["SHAPES", "Interface", "Skill", "AgentCard", "read_card", "card_shape",
           "declaration_from_card", "import_cards"]

SHAPES = ("v1.0", "v0.3", "v0.2", "legacy", "partial")
ORIGIN = "an Agent Card"
GRAMMAR = "[a-z0-9]+(\\.[a-z0-9-]+)+"


@dataclass(frozen=True)
class Interface:
    """Where the agent is served: a URL and the protocol binding spoken there."""

    url: str
    binding: str | None = None
    protocol_version: str | None = None


@dataclass(frozen=True)
class Skill:
    id: str
    path: str
    description: str | None = None


@dataclass(frozen=True)
class AgentCard:
    """The parts of an A2A Agent Card that bear on a declaration."""

    name: str
    shape: str
    protocol_version: str | None
    interfaces: tuple[Interface, ...]
    skills: tuple[Skill, ...]
    agent_version: str | None
    extended: str | None  # the field that says an extended card exists, if one does

    @property
    def possibly_incomplete(self) -> bool:
        return self.extended is not None


def card_shape(card: Mapping[str, Any]) -> str:
    """Which card shape `card` has (one of SHAPES), from its fields."""
    if "supportedInterfaces" in card:
        return "v1.0"
    if "url" not in card:
        return "partial"
    if any(key in card for key in ("protocolVersion", "preferredTransport", "additionalInterfaces")):
        return "v0.3"
    if isinstance(card.get("authentication"), Mapping):
        return "legacy"
    return "v0.2"


def read_card(obj: Any, source: str = "card", path: str = "$") -> tuple[AgentCard, list[Problem]]:
    """Read an Agent Card. Raises SchemaError if `obj` is not one (no object, no usable `name`,
    no `skills` array); returns the card and the problems of parts that were left out (a skill
    without an id, an interface without a URL), each at its JSON path."""
    if not isinstance(obj, Mapping):
        raise SchemaError([Problem(path, "an A2A Agent Card (a JSON object)", describe(obj))], source)
    fatal: list[Problem] = []
    if "skills" not in obj and any(key in obj for key in ("tools", "jsonrpc", "inputSchema")):
        what = "an MCP tool" if "inputSchema" in obj else "an MCP tool listing"
        raise SchemaError([Problem(path, "an A2A Agent Card", f"what looks like {what} "
                                                            f"(import it as a tool listing)")], source)
    name = obj.get("name")
    if why := _text_problem(name):
        fatal.append(Problem(json_path(path, "name"), f"the agent's name (AgentCard.name: {why})",
                             describe(name) if "name" in obj else "nothing"))
    skills_doc = obj.get("skills")
    if not isinstance(skills_doc, list):
        fatal.append(Problem(json_path(path, "skills"), "an array of skills (AgentCard.skills)",
                             describe(skills_doc) if "skills" in obj else "nothing"))
    if fatal:
        raise SchemaError(fatal, source)

    problems: list[Problem] = []
    shape = card_shape(obj)
    skills = []
    for i, item in enumerate(skills_doc):
        spath = json_path(json_path(path, "skills"), i)
        if not isinstance(item, Mapping):
            problems.append(Problem(spath, "a skill (an object)", describe(item)))
            continue
        skill_id = item.get("id")
        if not isinstance(skill_id, str) or not skill_id:
            problems.append(Problem(json_path(spath, "id"), "the skill's id (a non-empty string)",
                                    describe(skill_id) if "id" in item else "nothing"))
            continue
        description = item.get("description")
        skills.append(Skill(skill_id, json_path(spath, "id"),
                            description if isinstance(description, str) and description else None))
    interfaces = _interfaces(obj, shape, path, problems)
    capabilities = obj.get("capabilities") if isinstance(obj.get("capabilities"), Mapping) else {}
    extended = None
    if capabilities.get("extendedAgentCard") is True:
        extended = "capabilities.extendedAgentCard"
    elif obj.get("supportsAuthenticatedExtendedCard") is True:
        extended = "supportsAuthenticatedExtendedCard"
    protocol = obj.get("protocolVersion")
    if shape == "v1.0":
        versions = [i.protocol_version for i in interfaces if i.protocol_version]
        protocol = versions[0] if versions else None
    version = obj.get("version")
    card = AgentCard(name, shape, protocol if isinstance(protocol, str) else None, interfaces,
                     tuple(skills), version if isinstance(version, str) else None, extended)
    return card, problems


def _interfaces(obj: Mapping[str, Any], shape: str, path: str,
                problems: list[Problem]) -> tuple[Interface, ...]:
    """The endpoints a card names, in its order of preference."""
    out: list[Interface] = []
    if shape == "v1.0":
        items = obj.get("supportedInterfaces")
        ipath = json_path(path, "supportedInterfaces")
        if not isinstance(items, list):
            problems.append(Problem(ipath, "an array of interfaces", describe(items)))
            return ()
        for i, item in enumerate(items):
            if not isinstance(item, Mapping) or not isinstance(item.get("url"), str):
                problems.append(Problem(json_path(ipath, i), "an interface with a url",
                                        describe(item)))
                continue
            binding, version = item.get("protocolBinding"), item.get("protocolVersion")
            out.append(Interface(item["url"], binding if isinstance(binding, str) else None,
                                 version if isinstance(version, str) else None))
        return tuple(out)
    if shape == "partial":
        return ()
    url = obj.get("url")
    if not isinstance(url, str):
        problems.append(Problem(json_path(path, "url"), "the agent's URL (a string)", describe(url)))
        return ()
    preferred = obj.get("preferredTransport")
    # A2A 0.3: the main URL speaks preferredTransport, JSON-RPC when it is not stated.
    default = "JSONRPC" if shape == "v0.3" else None
    out.append(Interface(url, preferred if isinstance(preferred, str) else default,
                         obj.get("protocolVersion") if isinstance(obj.get("protocolVersion"), str) else None))
    extra = obj.get("additionalInterfaces")
    if extra is not None and not isinstance(extra, list):
        problems.append(Problem(json_path(path, "additionalInterfaces"), "an array of interfaces",
                                describe(extra)))
        extra = None
    for i, item in enumerate(extra or ()):
        if isinstance(item, Mapping) and isinstance(item.get("url"), str):
            iface = Interface(item["url"], item.get("transport") if isinstance(item.get("transport"), str) else None)
            if (iface.url, iface.binding) != (out[0].url, out[0].binding):
                out.append(iface)
        else:
            problems.append(Problem(json_path(json_path(path, "additionalInterfaces"), i),
                                    "an interface with a url", describe(item)))
    return tuple(out)


def declaration_from_card(card: AgentCard, supplied: Supplied, report: ImportReport,
                          source: str, path: str = "$") -> tuple[dict[str, Any] | None,
                                                                 list[str], list[tuple[str, str]]]:
    """The declaration a card gives with what the caller supplied, or None if it cannot be made.

    Returns (declaration, fields supplied, [(field not derived, why)]). Skills that cannot become
    capabilities are reported as skipped; a missing namespace skips the whole card.
    """
    if supplied.namespace is None:
        report.skip(source, path, "no namespace: an Agent Card has none and the caller supplied "
                                  "none (A3 §3 requires agent.namespace)")
        return None, [], []
    doc: dict[str, Any] = {"v": "1.0", "agent": {"name": card.name, "namespace": supplied.namespace},
                           "capabilities": [], "clearances": []}
    given: list[str] = ["namespace"]
    missing: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    normalised = unversioned = 0
    for skill in card.skills:
        version = supplied.version_for(skill.id)
        unversioned += version is None  # reported whether or not the id fits §2: both are missing
        name = _capability_name(skill, supplied, report, source)
        if name is None:
            continue
        if name in seen:
            report.skip(source, skill.path, f"skill id {skill.id!r} gives capability {name!r}, "
                                            f"already declared from skill {seen[name]!r}")
            continue
        seen[name] = skill.id
        normalised += name != skill.id
        if version is None:
            continue
        capability: dict[str, Any] = {"name": name, "version": version}
        if skill.description is not None:
            capability["description"] = skill.description
        doc["capabilities"].append(capability)
    if normalised:
        given.append("capability names (normalised skill ids)")
    if unversioned:
        agent_version = f" (its version {card.agent_version!r} is the agent's own release)" \
            if card.agent_version else ""
        missing.append(("capability version",
                        f"an Agent Card gives no capability major version{agent_version}; "
                        f"skills with no version supplied did not become capabilities"))
    elif doc["capabilities"]:
        given.append("capability versions")
    more, absent = supplied.fill(doc, card.name, ORIGIN)
    return doc, given + more, missing + absent


def _capability_name(skill: Skill, supplied: Supplied, report: ImportReport, source: str) -> str | None:
    """The capability name a skill id gives (§2), normalised only when the caller asked."""
    if is_identifier(skill.id):
        return skill.id
    if not supplied.normalise:
        report.skip(source, skill.path, f"skill id {skill.id!r} does not fit the §2 grammar "
                                        f"{GRAMMAR} (normalisation was not asked for)")
        return None
    suggestion = normalise_identifier(skill.id, supplied.skill_domain)
    if suggestion is None:
        why = "it has no domain segment and no domain was supplied" if supplied.skill_domain is None \
            else "nothing usable is left of it"
        report.skip(source, skill.path, f"skill id {skill.id!r} does not fit the §2 grammar {GRAMMAR} "
                                        f"and cannot be normalised: {why}")
        return None
    report.note("skill ids normalised", source, skill.path,
                f"skill id {skill.id!r} does not fit §2; normalised to capability {suggestion!r}")
    return suggestion


def import_cards(documents: Iterable[Document], supplied: Supplied,
                 report: ImportReport | None = None) -> ImportResult:
    """Declarations from Agent Cards: one per card that is a card and has a namespace to go in.

    Later cards for the same agent replace earlier ones (a v1.0 card and a v0.3 card of one
    agent give one declaration); every decision is in the report.
    """
    supplied.check()
    report = report or ImportReport("a2a")
    out = DeclarationSet(report)
    skill_ids: set[str] = set()
    for doc in documents:
        report.read(doc.source)
        try:
            card, problems = read_card(doc.value, doc.source, doc.path)
        except SchemaError as exc:
            for problem in exc.problems:
                report.skip(doc.source, problem.path, f"expected {problem.expected}, found {problem.found}")
            continue
        skill_ids.update(skill.id for skill in card.skills)
        for problem in problems:
            report.skip(doc.source, problem.path, f"expected {problem.expected}, found {problem.found}")
        decl, given, missing = declaration_from_card(card, supplied, report, doc.source, doc.path)
        if decl is None:
            continue
        detail = _detail(card, decl)
        if out.offer(decl, doc.source, doc.path, supplied=given, missing=missing, detail=detail):
            _note_card(card, doc, report)
    for agent in supplied.grants:
        if agent not in out:
            report.note("unused", "supplied", json_path("$.grants", agent),
                        f"grant for agent {agent!r} not used: no card made an agent of that name")
    for skill_id in supplied.skill_versions:
        if skill_id not in skill_ids:
            report.note("unused", "supplied", json_path("$.skill_versions", skill_id),
                        f"version for skill {skill_id!r} not used: no card lists that skill")
    declarations = out.declarations()
    return ImportResult(declarations, report, usable=bool(declarations))


def _note_card(card: AgentCard, doc: Document, report: ImportReport) -> None:
    """What a caller should know about a card whose agent was kept."""
    if card.possibly_incomplete:
        report.note("possibly incomplete", doc.source, doc.path,
                    f"agent {card.name!r} possibly incomplete: the card says an extended card exists "
                    f"({card.extended}), which may list skills this one does not")
    if not card.interfaces:
        why = "a partial card; the platform serving it fills it in" if card.shape == "partial" \
            else "none of its interfaces has a usable url"
        report.note("no endpoint", doc.source, doc.path,
                    f"agent {card.name!r}: the card names no endpoint ({why})")


def _detail(card: AgentCard, decl: Mapping[str, Any]) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "shape": card.shape,
        "skills": len(card.skills),
        "capabilities": len(decl["capabilities"]),
        "endpoints": [{"url": i.url, **({"binding": i.binding} if i.binding else {})}
                      for i in card.interfaces],
        "possibly_incomplete": card.possibly_incomplete,
    }
    if card.protocol_version:
        detail["protocol_version"] = card.protocol_version
    if card.agent_version:
        detail["agent_version"] = card.agent_version
    return detail

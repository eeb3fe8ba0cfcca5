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
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from ..errors import Problem, SchemaError, describe, json_path
from ..schema import is_identifier
from .collect import DeclarationSet, ImportResult
from .naming import normalise_identifier
from .report import ImportReport
from .fetch import WELL_KNOWN, endpoint_problem, without_credentials
from .signing import CardKeys, CardSignatures, verify_card
from .sources import Document
from .supply import Supplied, text_problem

__all__ = ["SHAPES", "Interface", "Skill", "AgentCard", "read_card", "card_shape", "is_oasf_record",
           "endpoint_of", "declaration_from_card", "import_cards", "ENDPOINT"]

SHAPES = ("v1.0", "v0.3", "v0.2", "legacy", "partial")
ORIGIN = "an Agent Card"
GRAMMAR = "[a-z0-9]+(\\.[a-z0-9-]+)+"
#: The top-level declaration member that says where and how to reach the agent (A3 §3 keeps
#: members it does not define, and a bound record carries the declaration as matched).
ENDPOINT = "endpoint"


def is_oasf_record(obj: Any) -> bool:
    """True for an OASF (AGNTCY directory) record, told by its own fields: `schema_version` with
    `locators`, `modules`, `extensions`, `domains` or `authors`, or skills named by taxonomy
    (`{"id": 10306, "name": "a/b/c"}`). An Agent Card has none of these."""
    if not isinstance(obj, Mapping) or "schema_version" not in obj:
        return False
    if any(key in obj for key in ("locators", "modules", "extensions", "domains", "authors")):
        return True
    skills = obj.get("skills")
    return isinstance(skills, list) and any(
        isinstance(skill, Mapping) and (isinstance(skill.get("id"), int) or "class_uid" in skill)
        for skill in skills)


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
    if is_oasf_record(obj):
        raise SchemaError([Problem(path, "an A2A Agent Card", "what looks like an OASF record "
                                                            "(import it with `a3fast import oasf`)")],
                          source)
    if "skills" not in obj and any(key in obj for key in ("tools", "jsonrpc", "inputSchema")):
        what = "an MCP tool" if "inputSchema" in obj else "an MCP tool listing"
        raise SchemaError([Problem(path, "an A2A Agent Card", f"what looks like {what} "
                                                            f"(import it as a tool listing)")], source)
    name = obj.get("name")
    if why := text_problem(name):
        fatal.append(Problem(json_path(path, "name"), f"the agent's name (AgentCard.name: {why})",
                             describe(name) if "name" in obj else "nothing"))
    skills_doc = obj.get("skills")
    if not isinstance(skills_doc, list):
        fatal.append(Problem(json_path(path, "skills"), "an array of skills (AgentCard.skills)",
                             describe(skills_doc) if "skills" in obj else "nothing"))
    if fatal:
        raise SchemaError(fatal, source)

    assert isinstance(name, str) and isinstance(skills_doc, list)  # else `fatal` was raised
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
        if description is not None and not isinstance(description, str):  # the skill is kept without it
            problems.append(Problem(json_path(spath, "description"), "the skill's description (a string)",
                                    describe(description)))
        skills.append(Skill(skill_id, json_path(spath, "id"),
                            description if isinstance(description, str) and description else None))
    interfaces = _interfaces(obj, shape, path, problems)
    found = obj.get("capabilities")
    capabilities = found if isinstance(found, Mapping) else {}
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


def _named(obj: Mapping[str, Any], key: str, path: str, problems: list[Problem]) -> str | None:
    """A member that names a transport or a version: its text, or None (absent, or a part left out
    when it is no string)."""
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    problems.append(Problem(json_path(path, key), "a name (a string)", describe(value)))
    return None


def _url(value: Any) -> TypeGuard[str]:
    """Whether `value` names a URL: a string with something in it. An empty one reads as absent, as
    a card's signature reads it (the signed form leaves empty values out), so an interface of `""`
    added to a signed card is refused, not taken as its endpoint under a signature still valid."""
    return isinstance(value, str) and value != ""


#: what an interface's url must be to become the agent's endpoint (`fetch.endpoint_problem`)
_ENDPOINT_URL = "an absolute http:// or https:// URL with a host and no user name or password"


def _endpoint(url: str, path: str, problems: list[Problem]) -> bool:
    """Whether the card's `url` (at `path`) can be the agent's endpoint; the problem noted when it
    cannot (`file:`, `javascript:`, credentials, a control character: the declaration made from the
    card carries its endpoint into every record of a placement on the agent)."""
    why = endpoint_problem(url)
    if why is None:
        return True
    problems.append(Problem(path, _ENDPOINT_URL, f"{describe(without_credentials(url, '…@'))}: {why}"))
    return False


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
            if not isinstance(item, Mapping) or not _url(item.get("url")):
                problems.append(Problem(json_path(ipath, i), "an interface with a url",
                                        describe(item)))
                continue
            where = json_path(ipath, i)
            if not _endpoint(item["url"], json_path(where, "url"), problems):
                continue
            out.append(Interface(item["url"], _named(item, "protocolBinding", where, problems),
                                 _named(item, "protocolVersion", where, problems)))
        return tuple(out)
    if shape == "partial":
        return ()
    url = obj.get("url")
    if not _url(url):
        problems.append(Problem(json_path(path, "url"), "the agent's URL (a non-empty string)", describe(url)))
        return ()
    if not _endpoint(url, json_path(path, "url"), problems):
        return ()
    # A2A 0.3: the main URL speaks preferredTransport, JSON-RPC when it is not stated (only then:
    # one stated as something else is a part left out, and no transport is made up for it)
    preferred = _named(obj, "preferredTransport", path, problems)
    if preferred is None and obj.get("preferredTransport") is None and shape == "v0.3":
        preferred = "JSONRPC"
    out.append(Interface(url, preferred, _named(obj, "protocolVersion", path, problems)))
    extra = obj.get("additionalInterfaces")
    if extra is not None and not isinstance(extra, list):
        problems.append(Problem(json_path(path, "additionalInterfaces"), "an array of interfaces",
                                describe(extra)))
        extra = None
    for i, item in enumerate(extra or ()):
        if isinstance(item, Mapping) and _url(item.get("url")):
            if not _endpoint(item["url"], json_path(json_path(json_path(path, "additionalInterfaces"), i), "url"),
                             problems):
                continue
            iface = Interface(item["url"], item.get("transport") if isinstance(item.get("transport"), str) else None)
            if (iface.url, iface.binding) != (out[0].url, out[0].binding):
                out.append(iface)
        else:
            problems.append(Problem(json_path(json_path(path, "additionalInterfaces"), i),
                                    "an interface with a url", describe(item)))
    return tuple(out)


def endpoint_of(card: AgentCard, fetched_from: str | None = None) -> dict[str, Any] | None:
    """Where and how to reach the agent: the card's first interface (`url`, `transport`,
    `protocol_version`), every interface when it names several, and `card`, the URL the card was
    fetched from (without a user name or password it was fetched with). A partial card fetched
    from an agent is reached where it was found."""
    endpoint: dict[str, Any] = {}
    fetched_from = without_credentials(fetched_from) if fetched_from is not None else None
    if card.interfaces:
        first = card.interfaces[0]
        endpoint["url"] = first.url
        if first.binding:
            endpoint["transport"] = first.binding
        if first.protocol_version:
            endpoint["protocol_version"] = first.protocol_version
        if len(card.interfaces) > 1:
            # each with its protocol version: a card may name one URL for two versions
            endpoint["interfaces"] = [{"url": i.url, **({"transport": i.binding} if i.binding else {}),
                                       **({"protocol_version": i.protocol_version} if i.protocol_version else {})}
                                      for i in card.interfaces]
    elif fetched_from is not None:
        base = fetched_from
        for suffix in WELL_KNOWN:
            base = base.removesuffix(suffix)
        endpoint["url"] = base
    if fetched_from is not None:
        endpoint["card"] = fetched_from
    return endpoint or None


def _namespace(card: AgentCard, supplied: Supplied, fetched_from: str | None) -> tuple[str | None, str | None]:
    """The namespace of the card's agent and how it was chosen (None when it was supplied)."""
    if supplied.namespace is not None:
        return supplied.namespace, None
    if not supplied.derive_namespace:
        return None, None
    url = fetched_from if fetched_from is not None else (card.interfaces[0].url if card.interfaces else None)
    host = _host(url) if url else None
    if not host or not url:
        return None, None
    where = "the URL the card was fetched from" if fetched_from is not None else "the card's URL"
    return host, f"namespace {host!r}: the host of {where} ({without_credentials(url)})"


def _host(url: str) -> str | None:
    """The URL's host, or None when it has none or the URL cannot be read (`https://[zz]/`)."""
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


def declaration_from_card(card: AgentCard, supplied: Supplied, report: ImportReport,
                          source: str, path: str = "$", fetched_from: str | None = None,
                          ) -> tuple[dict[str, Any] | None, list[str], list[tuple[str, str]]]:
    """The declaration a card gives with what the caller supplied, or None if it cannot be made.

    Returns (declaration, fields supplied, [(field not derived, why)]). Skills that cannot become
    capabilities are reported as skipped; a missing namespace skips the whole card.
    """
    namespace, derived_from = _namespace(card, supplied, fetched_from)
    if namespace is None:
        why = "the card names no URL with a host to take it from, and " if supplied.derive_namespace else ""
        report.skip(source, path, f"no namespace: an Agent Card has none, {why}the caller supplied "
                                  f"none (A3 §3 requires agent.namespace; give --namespace)")
        return None, [], []
    doc: dict[str, Any] = {"v": "1.0", "agent": {"name": card.name, "namespace": namespace},
                           "capabilities": [], "clearances": []}
    given: list[str] = ["namespace"] if derived_from is None else []
    if derived_from is not None:
        report.note("namespace derived", source, path, f"agent {card.name!r}: {derived_from}")
    missing: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    normalised = unversioned = defaulted_versions = 0
    for skill in card.skills:
        version = supplied.version_for(skill.id)
        unversioned += version is None  # reported whether or not the id fits §2: both are missing
        name = _capability_name(skill, supplied, report, source)
        if name is None:
            continue
        if name in seen:
            report.skip(source, skill.path, f"collision: skill id {skill.id!r} gives capability "
                                            f"{name!r}, already declared from skill {seen[name]!r} "
                                            f"of the same agent")
            continue
        seen[name] = skill.id
        normalised += name != skill.id
        if version is None:
            continue
        defaulted_versions += skill.id not in supplied.skill_versions
        capability: dict[str, Any] = {"name": name, "version": version}
        if skill.description is not None:
            capability["description"] = skill.description
        doc["capabilities"].append(capability)
    if normalised:
        domain = " (default domain)" if "skill_domain" in supplied.defaulted else ""
        given.append(f"capability names (normalised skill ids){domain}")
    if unversioned:
        agent_version = f" (its version {card.agent_version!r} is the agent's own release)" \
            if card.agent_version else ""
        missing.append(("capability version",
                        f"an Agent Card gives no capability major version{agent_version}; "
                        f"skills with no version supplied did not become capabilities"))
    elif doc["capabilities"]:
        # the default named only where some capability took it: versions given skill by skill are
        # the caller's answers, not a default
        given.append(f"capability versions (default {supplied.capability_version}: a card gives none)"
                     if "capability_version" in supplied.defaulted and defaulted_versions
                     else "capability versions")
    more, absent = supplied.fill(doc, card.name, ORIGIN)
    endpoint = endpoint_of(card, fetched_from)
    if endpoint is not None:
        doc[ENDPOINT] = endpoint
    else:
        absent.append(("endpoint", "the card names no URL (a partial card: the platform serving it "
                                   "fills it in); fetch it from the agent to record where it was found"))
    return doc, given + more, missing + absent


def _capability_name(skill: Skill, supplied: Supplied, report: ImportReport, source: str) -> str | None:
    """The capability name a skill id gives (§2), normalised only when the caller asked."""
    if is_identifier(skill.id):
        return skill.id
    if not supplied.normalise:
        report.skip(source, skill.path, f"skill id {skill.id!r} does not fit the §2 grammar "
                                        f"{GRAMMAR} (ids are kept strictly as written: --strict-ids)")
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
                 report: ImportReport | None = None, *, fetched: Mapping[str, str] | None = None,
                 keys: CardKeys | None = None, require_verified: bool = False) -> ImportResult:
    """Declarations from Agent Cards: one per card that is a card and has a namespace to go in.

    `fetched` maps a document's source to the URL its card was fetched from (its host can be the
    namespace, and a partial card's agent is reached there). A card's signatures are checked
    against `keys`: one that does not verify with a supplied key is skipped, an unverifiable one is
    kept and reported as unverified — unless `require_verified`, which skips every card that is not
    `verified` (an unsigned card, or one whose header was changed to name an unknown key, is no
    proof of who wrote it). Later cards for the same agent replace earlier ones (a v1.0
    card and a v0.3 card of one agent give one declaration); every decision is in the report.
    """
    supplied.check()
    report = report or ImportReport("a2a")
    out = DeclarationSet(report)
    skill_ids: set[str] = set()
    keys = keys if keys is not None else CardKeys()
    origins: dict[str, tuple[str, str, str]] = {}  # capability -> (skill id, agent, source)
    for doc in documents:
        report.read(doc.source)
        signatures = verify_card(doc.value, keys) if isinstance(doc.value, Mapping) else None
        try:
            card, problems = read_card(_as_covered(doc.value, signatures), doc.source, doc.path)
        except SchemaError as exc:
            for problem in exc.problems:
                report.skip(doc.source, problem.path, f"expected {problem.expected}, found {problem.found}")
            continue
        assert signatures is not None       # read_card refuses anything but an object
        skill_ids.update(skill.id for skill in card.skills)
        for problem in problems:
            report.skip(doc.source, problem.path, f"expected {problem.expected}, found {problem.found}")
        if signatures.status == "invalid":
            report.skip(doc.source, json_path(doc.path, "signatures"),
                        f"agent {card.name!r}: signature {signatures.summary()}")
            continue
        if require_verified and signatures.status != "verified":
            report.skip(doc.source, json_path(doc.path, "signatures"),
                        f"agent {card.name!r}: not verified (--require-signed): {signatures.summary()}")
            continue
        if signatures.status != "unsigned":
            report.note(f"signatures {signatures.status}", doc.source, json_path(doc.path, "signatures"),
                        f"agent {card.name!r}: {signatures.summary()}")
        origin = (fetched or {}).get(doc.source)
        decl, given, missing = declaration_from_card(card, supplied, report, doc.source, doc.path, origin)
        if decl is None:
            continue
        detail = _detail(card, decl)
        detail["signatures"] = signatures.to_dict()
        if out.offer(decl, doc.source, doc.path, supplied=given, missing=missing, detail=detail):
            _note_card(card, doc, report)
            _note_collisions(card, decl, doc, origins, supplied, report)
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


def _as_covered(card: Any, signatures: CardSignatures | None) -> Any:
    """A verified card as its signature covers it at the top level, where a member decides how the
    card is read: a member the signature leaves out (an empty `supportedInterfaces` added to a signed
    0.3 card would make it an interface-less v1.0 one; a compatibility field the SDK adds) is not
    read. Deeper members are read as they are (a member emptied there reads as absent either way,
    and the report's paths stay the file's); an empty `skills` array is kept, as it is unsigned."""
    if signatures is None or signatures.covered is None:
        return card
    covered = signatures.covered
    return {key: value for key, value in card.items()
            if key in covered or (key == "skills" and isinstance(value, list))}


def _note_collisions(card: AgentCard, decl: Mapping[str, Any], doc: Document,
                     origins: dict[str, tuple[str, str, str]], supplied: Supplied,
                     report: ImportReport) -> None:
    """Two agents whose different skill ids became one capability: a task asking for it will
    take either, which may not be what either card meant."""
    by_name: dict[str, str] = {}
    for skill in card.skills:
        name = skill.id if is_identifier(skill.id) else (
            normalise_identifier(skill.id, supplied.skill_domain) if supplied.normalise else None)
        if name is not None:
            by_name.setdefault(name, skill.id)
    for capability in decl["capabilities"]:
        name = capability["name"]
        skill_id = by_name.get(name, name)
        earlier = origins.get(name)
        if earlier is None:
            origins[name] = (skill_id, card.name, doc.source)
        elif earlier[0] != skill_id and earlier[1] != card.name:
            report.note("collisions", doc.source, doc.path,
                        f"capability {name!r}: skill {skill_id!r} of agent {card.name!r} and skill "
                        f"{earlier[0]!r} of agent {earlier[1]!r} ({earlier[2]}) are one capability")


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

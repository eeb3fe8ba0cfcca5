"""The documents of portable authority, parsed and validated in the schema's error style.

- capability contract: what an operation means (portable-authority "Capability contract");
- host mapping: the concrete callable on this host that satisfies a contract;
- skill: the capabilities it requires and those it can use when present;
- the three boundaries: connection (a paired, revocable installation and what it may ever do),
  engagement descriptor (what it may do in one experience and operating context, signed by the
  experience, with an expiry), runtime policy (local rules over operation, resource, effects, data
  classes and reversibility: allow, confirm or deny).

Every parser collects every problem of a document (and of a list of documents) before raising one
`SchemaError`, each problem naming its JSON path. Fields a document does not define are kept in
`doc` and otherwise ignored — except inside a policy rule's `when`, where a misspelt condition would
silently change what the rule matches, so an unknown condition is a problem.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..errors import Problem, json_path
from ..schema import AgentName, ProblemReader as _SchemaReader
from .keys import ALGORITHM, b64url_decode, load_public_key
from .times import parse_instant
from .vocabulary import CONFIRMATIONS, DEFAULT_VERSION, OPERATIONS, capability_key, parse_capability_ref

__all__ = [
    "DECISIONS", "CONDITIONS", "Contract", "HostMapping", "Skill", "Connection", "Signature",
    "Engagement", "Rule", "RuntimePolicy", "parse_contract", "parse_contracts", "parse_mapping",
    "parse_mappings", "parse_skill", "parse_skills", "parse_connection", "parse_engagement",
    "parse_policy",
]

#: Runtime decisions, least strict first: when several rules match, the strictest wins.
DECISIONS = ("allow", "confirm", "deny")
#: What a runtime rule may test; each but `reversible` lists alternatives, any of which matches.
CONDITIONS = ("operation", "resource", "effects", "data_classes", "capabilities", "reversible")
_SIGNATURE_BYTES = 64
_REF_TEXT = "a capability reference \"<id>\" or \"<id>/<major>\" (id matching [a-z0-9]+(\\.[a-z0-9-]+)+)"


@dataclass(frozen=True, slots=True)
class Contract:
    """What a capability means: operation, resource and qualifiers (portable-authority; A3 §2 ids)."""

    id: str
    version: int
    operation: str
    resource: str
    effects: tuple[str, ...]
    data_classes: tuple[str, ...]
    reversible: bool | None
    confirmation: str
    doc: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def key(self) -> str:
        return capability_key(self.id, self.version)


@dataclass(frozen=True, slots=True)
class HostMapping:
    """A concrete callable on this host (`tool`, reached over `transport`) that satisfies a contract."""

    tool: str
    satisfies: str
    transport: str
    doc: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Skill:
    """A portable skill: all `required` capabilities must resolve; `optional` ones enrich it."""

    id: str
    required: tuple[str, ...]
    optional: tuple[str, ...]
    doc: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Connection:
    """A paired installation: the experience it is paired with, the experience's signing keys, what
    it may ever do, and when (if ever) it was revoked."""

    id: str
    experience: str
    capabilities: tuple[str, ...]
    keys: Mapping[str, Ed25519PublicKey] = field(compare=False, repr=False)
    agent: AgentName | None = None
    paired_at: datetime | None = None
    revoked_at: datetime | None = None
    doc: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Signature:
    alg: str
    kid: str
    value: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class Engagement:
    """What the connection may do in one experience and operating context, until `expires`.

    `doc` is the descriptor as received: its canonical bytes are what the signature covers.
    """

    experience: str
    context: str
    connection: str
    capabilities: tuple[str, ...]
    expires: datetime
    signature: Signature
    issued_at: datetime | None = None
    doc: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Rule:
    """One local rule: when a contract meets every stated condition, `decision` applies to it."""

    id: str
    decision: str
    operation: tuple[str, ...] | None = None
    resource: tuple[str, ...] | None = None
    effects: tuple[str, ...] | None = None
    data_classes: tuple[str, ...] | None = None
    capabilities: tuple[str, ...] | None = None
    reversible: bool | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class RuntimePolicy:
    """Local rules the client applies before exposing a tool; `default` decides what no rule matches."""

    rules: tuple[Rule, ...] = ()
    default: str = "allow"
    doc: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


class ProblemReader(_SchemaReader):
    """The schema's reader, plus the value kinds authority documents use."""

    def required(self, doc: Mapping[str, Any], path: str, keys: Iterable[str]) -> None:
        for key in keys:
            if key not in doc:
                self.fail(json_path(path, key), f"the required field {key!r}", None, "nothing")

    def ref(self, value: Any, path: str) -> str | None:
        key = parse_capability_ref(value)
        if key is None:
            self.fail(path, _REF_TEXT, value)
        return key

    def refs(self, value: Any, path: str) -> tuple[str, ...]:
        """References in order, without repeats (an engagement may list thousands: kept cheap)."""
        out: dict[str, None] = {}
        for i, item in enumerate(self.array(value, path)):
            key = parse_capability_ref(item)
            if key is None:
                self.fail(json_path(path, i), _REF_TEXT, item)
            else:
                out[key] = None
        return tuple(out)

    def choice(self, value: Any, path: str, options: Sequence[str]) -> str | None:
        if isinstance(value, str) and value in options:
            return value
        self.fail(path, "one of " + ", ".join(options), value)
        return None

    def boolean(self, value: Any, path: str) -> bool | None:
        if isinstance(value, bool):
            return value
        self.fail(path, "true or false", value)
        return None

    def instant(self, value: Any, path: str) -> datetime | None:
        instant = parse_instant(value)
        if instant is None:
            self.fail(path, "an RFC 3339 date-time with an offset, such as \"2026-03-01T12:00:00Z\"", value)
        return instant


def _document(r: ProblemReader, obj: Any, path: str, required: Iterable[str]) -> Mapping[str, Any] | None:
    doc = r.obj(obj, path)
    if doc is not None:
        r.required(doc, path, required)
    return doc


def _contract(r: ProblemReader, obj: Any, path: str) -> Contract | None:
    n = len(r.problems)  # counted before the required fields: a document missing one is not parsed
    doc = _document(r, obj, path, ("id", "operation", "resource", "confirmation"))
    if doc is None:
        return None
    ident = r.identifier(doc.get("id"), json_path(path, "id"), "capability") if "id" in doc else None
    version: int | None = DEFAULT_VERSION
    if "version" in doc:
        version = r.version(doc["version"], json_path(path, "version"))
    operation = r.choice(doc["operation"], json_path(path, "operation"), OPERATIONS) if "operation" in doc else None
    resource = r.text(doc["resource"], json_path(path, "resource")) if "resource" in doc else None
    effects = r.texts(doc.get("effects", []), json_path(path, "effects"), "an effect (a non-empty string)")
    data = r.texts(doc.get("data_classes", []), json_path(path, "data_classes"), "a data class (a non-empty string)")
    reversible = None
    if doc.get("reversible") is not None:
        reversible = r.boolean(doc["reversible"], json_path(path, "reversible"))
    confirmation = None
    if "confirmation" in doc:
        confirmation = r.choice(doc["confirmation"], json_path(path, "confirmation"), CONFIRMATIONS)
    # `trusted: false` marks a draft whose every use needs a person's confirmation (Catalog): any
    # other value than a boolean (or null, absent) is refused rather than read as trusted
    if doc.get("trusted") is not None:
        r.boolean(doc["trusted"], json_path(path, "trusted"))
    if len(r.problems) > n:
        return None
    # the reader leaves None only beside a problem
    assert ident is not None and version is not None and operation is not None and resource is not None
    assert confirmation is not None
    return Contract(ident, version, operation, resource, tuple(dict.fromkeys(effects)),
                    tuple(dict.fromkeys(data)), reversible, confirmation, doc)


def _mapping(r: ProblemReader, obj: Any, path: str) -> HostMapping | None:
    n = len(r.problems)  # counted before the required fields: a document missing one is not parsed
    doc = _document(r, obj, path, ("tool", "satisfies", "transport"))
    if doc is None:
        return None
    tool = r.text(doc["tool"], json_path(path, "tool"), "a tool name (a non-empty string)") if "tool" in doc else None
    satisfies = r.ref(doc["satisfies"], json_path(path, "satisfies")) if "satisfies" in doc else None
    transport = None
    if "transport" in doc:
        transport = r.text(doc["transport"], json_path(path, "transport"), "a transport such as \"mcp\"")
    if len(r.problems) > n:
        return None
    assert tool is not None and satisfies is not None and transport is not None  # None only beside a problem
    return HostMapping(tool, satisfies, transport, doc)


def _skill(r: ProblemReader, obj: Any, path: str) -> Skill | None:
    n = len(r.problems)  # counted before the required fields: a document missing one is not parsed
    doc = _document(r, obj, path, ("id", "required"))
    if doc is None:
        return None
    ident = r.identifier(doc["id"], json_path(path, "id"), "skill") if "id" in doc else None
    required = r.refs(doc.get("required", []), json_path(path, "required"))
    optional = r.refs(doc.get("optional", []), json_path(path, "optional"))
    for key in set(required) & set(optional):
        r.fail(json_path(path, "optional"), "a capability listed once, as required or as optional",
               None, f"{key} in both")
    if len(r.problems) > n:
        return None
    assert ident is not None  # None only beside a problem
    return Skill(ident, required, optional, doc)


_Parsed = TypeVar("_Parsed")


def _many(parse_one: Callable[[ProblemReader, Any, str], _Parsed | None], docs: Sequence[Any],
          paths: Sequence[str] | None, key_of: Callable[[_Parsed], Hashable] | None = None,
          unique: str = "") -> tuple[_Parsed, ...]:
    """Parse a list of documents with every problem collected; with `key_of`, a key seen twice is a
    problem too (`unique` says what must be unique, for the message)."""
    if paths is None:
        paths = [f"$[{i}]" for i in range(len(docs))]
    r = ProblemReader()
    out: list[_Parsed] = []
    first_at: dict[Hashable, str] = {}
    for doc, path in zip(docs, paths):
        parsed = parse_one(r, doc, path)
        if parsed is None:
            continue
        if key_of is not None:
            key = key_of(parsed)
            if key in first_at:
                r.problems.append(Problem(path, unique, f"{key} again (first at {first_at[key]})"))
                continue
            first_at[key] = path
        out.append(parsed)
    r.raise_if_any()
    return tuple(out)


def parse_contract(obj: Any, path: str = "$") -> Contract:
    """One capability contract (portable-authority "Capability contract")."""
    return _many(_contract, [obj], [path])[0]


def parse_contracts(docs: Sequence[Any], paths: Sequence[str] | None = None) -> tuple[Contract, ...]:
    """Contracts, at most one per id and major version."""
    return _many(_contract, docs, paths, lambda c: c.key, "one contract per id and major version")


def parse_mapping(obj: Any, path: str = "$") -> HostMapping:
    """One host mapping (portable-authority "Host-specific mapping")."""
    return _many(_mapping, [obj], [path])[0]


def parse_mappings(docs: Sequence[Any], paths: Sequence[str] | None = None) -> tuple[HostMapping, ...]:
    """Host mappings in the host's order of preference (several may satisfy one capability)."""
    return _many(_mapping, docs, paths)


def parse_skill(obj: Any, path: str = "$") -> Skill:
    """One skill (portable-authority "Portable skills")."""
    return _many(_skill, [obj], [path])[0]


def parse_skills(docs: Sequence[Any], paths: Sequence[str] | None = None) -> tuple[Skill, ...]:
    """Skills, at most one per id."""
    return _many(_skill, docs, paths, lambda s: s.id, "one skill per id")


#: what a connection's key entry holds
_KEY_MEMBERS = frozenset({"kid", "alg", "public_key"})


def _trusted_keys(r: ProblemReader, value: Any, path: str) -> dict[str, Ed25519PublicKey]:
    keys: dict[str, Ed25519PublicKey] = {}
    seen: set[str] = set()
    for i, item in enumerate(r.array(value, path)):
        kpath = json_path(path, i)
        entry = _document(r, item, kpath, ("kid", "public_key"))
        if entry is None:
            continue
        kid = r.text(entry["kid"], json_path(kpath, "kid"), "a key id (a non-empty string)") if "kid" in entry else None
        if "alg" in entry:
            r.choice(entry["alg"], json_path(kpath, "alg"), (ALGORITHM,))
        for member in entry:
            # a key is trusted whole or not at all: a member this version does not read (a key's own
            # `revoked_at`, say) would leave it trusted while its writer meant otherwise
            if member not in _KEY_MEMBERS:
                r.fail(json_path(kpath, member), "kid, alg and public_key only in a key (to "
                                                 "stop trusting one, remove it; the connection's own "
                                                 "revoked_at revokes it whole)", None, found="a member a key does not have")
        key = None
        if isinstance(entry.get("public_key"), str):
            try:
                key = load_public_key(entry["public_key"])
            except ValueError as exc:
                r.fail(json_path(kpath, "public_key"), str(exc), entry["public_key"])
        elif "public_key" in entry:
            r.fail(json_path(kpath, "public_key"), "a public key (base64url or PEM text)", entry["public_key"])
        if kid is not None and kid in seen:
            r.fail(json_path(kpath, "kid"), "one key per key id", kid)
        elif kid is not None:
            seen.add(kid)
            if key is not None:
                keys[kid] = key
    return keys


def parse_connection(obj: Any, path: str = "$") -> Connection:
    """A connection: `{id, experience, capabilities, keys, agent?, paired_at?, revoked_at?}`."""
    r = ProblemReader()
    doc = r.document(obj, path)
    r.required(doc, path, ("id", "experience", "capabilities", "keys"))
    ident = r.text(doc["id"], json_path(path, "id"), "a connection id (a non-empty string)") if "id" in doc else None
    experience = None
    if "experience" in doc:
        experience = r.text(doc["experience"], json_path(path, "experience"), "an experience id (a non-empty string)")
    capabilities = r.refs(doc.get("capabilities", []), json_path(path, "capabilities"))
    keys = _trusted_keys(r, doc.get("keys", []), json_path(path, "keys"))
    agent = None
    if doc.get("agent") is not None:
        apath = json_path(path, "agent")
        agent_doc = r.obj(doc["agent"], apath)
        if agent_doc is not None:
            name = r.text(agent_doc.get("name"), json_path(apath, "name"), "the agent's name (a non-empty string)")
            namespace = r.text(agent_doc.get("namespace"), json_path(apath, "namespace"),
                               "the agent's namespace (a non-empty string)")
            agent = AgentName(name, namespace) if name and namespace else None
    paired_at = r.instant(doc["paired_at"], json_path(path, "paired_at")) if doc.get("paired_at") is not None else None
    revoked_at = r.instant(doc["revoked_at"], json_path(path, "revoked_at")) if doc.get("revoked_at") is not None else None
    r.raise_if_any()
    assert ident is not None and experience is not None  # None only beside a problem
    return Connection(ident, experience, capabilities, keys, agent, paired_at, revoked_at, doc)


def parse_engagement(obj: Any, path: str = "$") -> Engagement:
    """An engagement descriptor's structure (not its signature: see `engagement.verify_engagement`).

    `{experience, context, connection, capabilities, expires, issued_at?, signature: {alg, kid, value}}`
    """
    r = ProblemReader()
    doc = r.document(obj, path)
    r.required(doc, path, ("experience", "context", "connection", "capabilities", "expires", "signature"))
    texts: dict[str, str | None] = {}
    for key, what in (("experience", "an experience id"), ("context", "an operating context"),
                      ("connection", "a connection id")):
        texts[key] = r.text(doc[key], json_path(path, key), f"{what} (a non-empty string)") if key in doc else None
    capabilities = r.refs(doc.get("capabilities", []), json_path(path, "capabilities"))
    expires = r.instant(doc["expires"], json_path(path, "expires")) if "expires" in doc else None
    issued_at = r.instant(doc["issued_at"], json_path(path, "issued_at")) if doc.get("issued_at") is not None else None
    if expires is not None and issued_at is not None and expires <= issued_at:
        r.fail(json_path(path, "expires"), "an instant after issued_at", doc["expires"])
    signature = None
    if "signature" in doc:
        spath = json_path(path, "signature")
        sig = _document(r, doc["signature"], spath, ("alg", "kid", "value"))
        if sig is not None:
            alg = r.choice(sig["alg"], json_path(spath, "alg"), (ALGORITHM,)) if "alg" in sig else None
            kid = r.text(sig["kid"], json_path(spath, "kid"), "a key id (a non-empty string)") if "kid" in sig else None
            value = b64url_decode(sig.get("value"))
            if "value" in sig and (value is None or len(value) != _SIGNATURE_BYTES):
                r.fail(json_path(spath, "value"), "a 64-byte Ed25519 signature as unpadded base64url",
                       sig["value"])
            elif alg and kid and value is not None:
                signature = Signature(alg, kid, value)
    r.raise_if_any()
    experience, context, connection = texts["experience"], texts["context"], texts["connection"]
    # the reader leaves None only beside a problem
    assert experience is not None and context is not None and connection is not None
    assert expires is not None and signature is not None
    return Engagement(experience, context, connection, capabilities, expires, signature, issued_at, doc)


def _rule(r: ProblemReader, obj: Any, path: str) -> Rule | None:
    n = len(r.problems)  # counted before the required fields: a document missing one is not parsed
    doc = _document(r, obj, path, ("id", "decision"))
    if doc is None:
        return None
    ident = r.text(doc["id"], json_path(path, "id"), "a rule id (a non-empty string)") if "id" in doc else None
    decision = r.choice(doc["decision"], json_path(path, "decision"), DECISIONS) if "decision" in doc else None
    reason = r.text(doc["reason"], json_path(path, "reason")) if doc.get("reason") is not None else None
    conditions: dict[str, Any] = {}
    wpath = json_path(path, "when")
    when = r.obj(doc["when"], wpath) if "when" in doc else {}
    for key, value in (when or {}).items():
        cpath = json_path(wpath, key)
        if key not in CONDITIONS:
            r.fail(cpath, "a condition among " + ", ".join(CONDITIONS), None, f"unknown condition {key!r}")
            continue
        if key != "reversible" and value == []:  # alternatives none can match: no rule means that
            r.fail(cpath, "a non-empty array", value)
        if key == "reversible":
            conditions[key] = r.boolean(value, cpath)
        elif key == "operation":
            conditions[key] = tuple(r.choice(v, json_path(cpath, i), OPERATIONS) for i, v in enumerate(r.array(value, cpath)))
        elif key == "capabilities":
            conditions[key] = r.refs(value, cpath)
        else:
            conditions[key] = r.texts(value, cpath)
    if len(r.problems) > n:
        return None
    assert ident is not None and decision is not None  # None only beside a problem
    return Rule(ident, decision, reason=reason, **conditions)


def parse_policy(obj: Any, path: str = "$") -> RuntimePolicy:
    """A runtime policy: `{default?: allow|confirm|deny, rules?: [{id, decision, when?, reason?}]}`.

    Every rule whose conditions a contract meets applies; the strictest decision wins (deny, then
    confirm, then allow), so rule order never changes a result. `default` (allow when absent)
    decides capabilities no rule matches. A policy that allows everything is `{}`: an object
    holding other members but neither `rules` nor `default` is refused, since it is most likely
    another document (requirements, a connection) given in its place, and it would deny nothing.
    """
    r = ProblemReader()
    doc = r.document(obj, path)
    if doc and "rules" not in doc and "default" not in doc:
        members = ", ".join(repr(k) for k in list(doc)[:3]) + (", ..." if len(doc) > 3 else "")
        r.fail(path, "a runtime policy: `rules` or `default` ({} for one that allows everything)", doc,
               f"an object with neither, holding {members}")
        r.raise_if_any()
    default: str | None = "allow"
    if "default" in doc:
        default = r.choice(doc["default"], json_path(path, "default"), DECISIONS)
    rules, seen = [], set()
    rpath = json_path(path, "rules")
    for i, item in enumerate(r.array(doc.get("rules", []), rpath)):
        rule = _rule(r, item, json_path(rpath, i))
        if rule is not None and rule.id in seen:
            r.fail(json_path(json_path(rpath, i), "id"), "one rule per id", rule.id)
        elif rule is not None:
            seen.add(rule.id)
            rules.append(rule)
    r.raise_if_any()
    assert default is not None  # None only beside a problem
    return RuntimePolicy(tuple(rules), default, doc)

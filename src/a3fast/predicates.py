"""Predicates (§5): canonical strings, derivation, parsing back, and satisfaction by a declaration.

This module is the literal reading of §5 that both engines are tested against: `satisfies` checks
one predicate against one declaration with no index at all.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, NamedTuple, TypeVar

from .engines import ENGINE, ingest_module

if TYPE_CHECKING:
    from .schema import Declaration, Requirements

__all__ = [
    "CAPABILITY", "CLEARANCE", "TOOL", "RESIDENCY", "LATENCY", "AGENT_REF", "ANTI_AFFINITY", "KINDS",
    "UNMET_CODE", "Predicate", "capability", "clearance", "tool", "residency", "latency_class",
    "derive_predicates", "parse_predicate", "satisfies",
    "declaration_keys", "evaluated_keys", "first_failed", "derive",
]

CAPABILITY = "capability"
CLEARANCE = "clearance"
TOOL = "tool"
RESIDENCY = "residency"
LATENCY = "model.latency_class"
AGENT_REF = "agentRef"
ANTI_AFFINITY = "anti-affinity"
#: Predicate kinds in derivation order (docs/design.md, reading 1).
KINDS = (CAPABILITY, CLEARANCE, TOOL, RESIDENCY, LATENCY, AGENT_REF, ANTI_AFFINITY)

#: §7 satisfaction error code per predicate kind.
UNMET_CODE = {
    CAPABILITY: "E_CAPABILITY_UNMET",
    CLEARANCE: "E_CLEARANCE_UNMET",
    TOOL: "E_TOOL_UNMET",
    RESIDENCY: "E_RESIDENCY_UNMET",
    LATENCY: "E_MODEL_UNMET",
    AGENT_REF: "E_AGENTREF_UNMET",
    ANTI_AFFINITY: "E_ANTIAFFINITY_UNMET",
}


class Predicate(NamedTuple):
    """A parsed predicate string: its kind and argument (for capabilities, name and version)."""

    kind: str
    arg: str
    version: int | None = None

    def __str__(self) -> str:
        if self.kind == CAPABILITY:
            return f"{CAPABILITY}:{self.arg}/{self.version}"
        return f"{self.kind}:{self.arg}"


def capability(name: str, version: int) -> str:
    return f"capability:{name}/{version}"


def clearance(identifier: str) -> str:
    return f"clearance:{identifier}"


def tool(name: str) -> str:
    return f"tool:{name}"


def residency(label: str) -> str:
    return f"residency:{label}"


def latency_class(cls: str) -> str:
    return f"model.latency_class:{cls}"


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    # dict keeps insertion order: a predicate that repeats keeps its first place.
    return tuple(dict.fromkeys(items))


def derive_predicates(req: Requirements) -> tuple[str, ...]:
    """The predicate set of a requirements document, in derivation order (§5; docs/design.md, reading 1).

    `req` may be one a caller made itself, with values no parser took (a version of True, say), so
    its set is derived afresh and never kept in derive's memo, which the parsers' sets share."""
    return _derive(req.capabilities, req.clearances, req.tools, req.residency, req.latency_class,
                   req.agent_ref, req.exclude)


def derive(capabilities, clearances, tools, residency_label, latency, agent_ref_name, exclude) -> tuple[str, ...]:
    """derive_predicates from the parsed fields (the parser calls it before it builds Requirements)."""
    # Tasks repeat a small vocabulary: a set already derived is looked up. A set is kept only when
    # its values are of the exact types the parsers give: a version of True (or 1.0) equals 1 and
    # hashes as 1, so a set derived from one would be found for the parsed version 1.
    key = (capabilities, clearances, tools, residency_label, latency, agent_ref_name, exclude)
    known = DERIVED.get(key)
    if known is None:
        known = _derive(capabilities, clearances, tools, residency_label, latency, agent_ref_name, exclude)
        if (len(DERIVED) < DERIVED_LIMIT and _exact(key)
                and DERIVED_ONCE.seen_before(hash(key), DERIVED_LIMIT)):
            DERIVED[key] = known
    return known


def _plain_tuple(value: object) -> bool:
    """Whether `value` is a tuple (a named one, as Capability is) that compares and hashes as one."""
    kind = type(value)
    return isinstance(value, tuple) and kind.__eq__ is tuple.__eq__ and kind.__hash__ is tuple.__hash__


def _exact(key: tuple) -> bool:
    """Whether derive's arguments are of the exact types a parser gives: capabilities (plain named
    tuples) of a `str` name and an `int` version, tuples of `str`, and `str` or None."""
    capabilities, clearances, tools, residency_label, latency, agent_ref_name, exclude = key
    for value in (residency_label, latency, agent_ref_name):
        if value is not None and type(value) is not str:
            return False
    return (type(capabilities) is tuple
            and all(_plain_tuple(c) and type(c.name) is str and type(c.version) is int for c in capabilities)
            and all(type(items) is tuple and all(type(item) is str for item in items)
                    for items in (clearances, tools, exclude)))


#: derive's memo, by the tuple of its arguments, at most DERIVED_LIMIT sets: the compiled reader of
#: requirements (a3fast._ingest) looks a set up here itself, and adds one it derives as derive does.
#: A set is kept from its second derivation on; the first is only noted, by its key's hash, in
#: DERIVED_ONCE (at most DERIVED_LIMIT notes, then forgotten at once). So the memo fills with the
#: task types that repeat, not with the first 16,384 tasks met, and a task met once leaves nothing
#: in it (docs/performance.md, "One-off tasks let go").
DERIVED_LIMIT = 1 << 14
DERIVED: dict[tuple, tuple[str, ...]] = {}
DERIVED_ONCE = ingest_module(ENGINE).Notes()


def _derive(capabilities, clearances, tools, residency_label, latency, agent_ref_name, exclude) -> tuple[str, ...]:
    # Written out rather than through the helpers above: this runs once per placement from a dict.
    out = [f"capability:{c.name}/{c.version}" for c in capabilities]
    if clearances:
        out += ["clearance:" + c for c in clearances]
    if tools:
        out += ["tool:" + t for t in tools]
    if residency_label is not None:
        out.append("residency:" + residency_label)
    if latency is not None:
        out.append("model.latency_class:" + latency)
    if agent_ref_name is not None:
        out.append("agentRef:" + agent_ref_name)
    if exclude:
        out += ["anti-affinity:" + name for name in exclude]
    return tuple(dict.fromkeys(out))


def parse_predicate(text: str) -> Predicate | None:
    """Parse a canonical predicate string by its first colon (docs/design.md, reading 5); None if it
    is not one.

    The capability version follows the last '/'; tool names and labels are opaque.
    """
    if not isinstance(text, str):
        return None
    kind, sep, arg = text.partition(":")
    if not sep or not arg or kind not in KINDS:
        return None
    if kind == CAPABILITY:
        name, slash, version = arg.rpartition("/")
        if not slash or not name or not version.isdigit() or not version.isascii():
            return None
        if len(version) > 1 and version[0] == "0":
            return None  # not canonical: versions are written without leading zeros
        return Predicate(kind, name, int(version))
    return Predicate(kind, arg)


def satisfies(decl: Declaration, predicate: str | Predicate) -> bool:
    """Whether `decl` satisfies one predicate, read literally from §5 (docs/design.md, reading 4).

    A string that is not a predicate is satisfied by nobody.
    """
    p = parse_predicate(predicate) if isinstance(predicate, str) else predicate
    if p is None:
        return False
    kind, arg = p.kind, p.arg
    if kind == CAPABILITY:
        return any(c.name == arg and c.version == p.version for c in decl.capabilities)
    if kind == CLEARANCE:
        return arg in decl.clearances
    if kind == TOOL:
        return decl.tools is not None and arg in decl.tools
    if kind == RESIDENCY:
        return decl.residency is not None and arg in decl.residency
    if kind == LATENCY:
        return decl.model is not None and decl.model.latency_class == arg
    if kind == AGENT_REF:
        return decl.agent.name == arg
    return decl.agent.name != arg  # anti-affinity


_Predicate = TypeVar("_Predicate", str, Predicate)


def first_failed(decl: Declaration, predicates: Iterable[_Predicate]) -> _Predicate | None:
    """The first predicate (strings or parsed, in the given order) that `decl` fails, or None if it
    satisfies all."""
    for p in predicates:
        if not satisfies(decl, p):
            return p
    return None


def declaration_keys(decl: Declaration) -> tuple[str, ...]:
    """Every satisfiable predicate string of a declaration: what the index interns for it."""
    keys = [capability(c.name, c.version) for c in decl.capabilities]
    keys += [clearance(c) for c in decl.clearances]
    keys += [tool(t) for t in decl.tools or ()]
    keys += [residency(label) for label in decl.residency or ()]
    if decl.model is not None and decl.model.latency_class is not None:
        keys.append(latency_class(decl.model.latency_class))
    return _unique(keys)


def evaluated_keys(decl: Declaration) -> tuple[str, ...]:
    """The capability predicates a declaration substantiates with an `evaluation`."""
    return _unique(capability(c.name, c.version) for c in decl.capabilities if c.substantiated)

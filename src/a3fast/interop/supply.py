"""What the caller supplies because the source cannot say it, and the grants file.

An A2A Agent Card has no namespace, no capability versions, no clearances, no residency and no
model (A3 §8: a runtime "MUST source clearances elsewhere"); an MCP tool listing describes no agent
at all. `Supplied` holds the caller's answers; `fill` applies them to a declaration and says which
fields were supplied and which stay absent, and why, so the report can tell the two apart.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import Problem, SchemaError, describe, json_path
from ..schema import CONTROL, DECIMAL, LATENCY_CLASSES, MAX_TEXT, MAX_VERSION, is_identifier
from .naming import is_domain

__all__ = ["Supplied", "read_grants"]

IDENTIFIER_TEXT = "a clearance identifier matching [a-z0-9]+(\\.[a-z0-9-]+)+ (§2)"


def text_problem(value: Any) -> str | None:
    """Why `value` cannot be an A3 name or label (§3), or None if it can."""
    if not isinstance(value, str) or not value:
        return "a non-empty string"
    if len(value) > MAX_TEXT:
        return f"at most {MAX_TEXT} characters"
    if CONTROL.search(value):
        return "no control characters"
    return None


@dataclass(frozen=True)
class Supplied:
    """Fields the caller supplies for the agents an import makes.

    `capability_version` is the major version given to every skill that `skill_versions` does not
    name; `capabilities` are `(name, version)` pairs declared by agents made from a tool binding;
    `clearances` are granted to every agent made, `grants` to one agent each (by agent name).
    `normalise` asks for §2 identifiers to be suggested for skill ids that do not fit, prefixed
    with `skill_domain` when given.
    """

    namespace: str | None = None
    capability_version: int | None = None
    skill_versions: Mapping[str, int] = field(default_factory=dict)
    capabilities: tuple[tuple[str, int], ...] = ()
    clearances: tuple[str, ...] = ()
    grants: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    residency: tuple[str, ...] | None = None
    latency_class: str | None = None
    cost_ceiling_usd: str | None = None
    normalise: bool = False
    skill_domain: str | None = None
    #: When no namespace is supplied, take it from the source: a card's URL host (the host it was
    #: fetched from, or the host of its first interface), a manifest's metadata.namespace.
    derive_namespace: bool = False
    #: Supplied fields that are defaults rather than the caller's answers ("capability_version",
    #: "skill_domain"): the report says so, since the source gave nothing and neither did the caller.
    defaulted: frozenset[str] = frozenset()

    def check(self) -> "Supplied":
        """Return self, or raise SchemaError naming each supplied value that a declaration would
        refuse, or that has the wrong type (paths: `$.namespace`, `$.clearances[0]`,
        `$.grants['agent'][1]`, ...); never another exception, whatever the fields hold."""
        problems: list[Problem] = []

        def fail(path: str, expected: str, value: Any) -> None:
            problems.append(Problem(path, expected, describe(value)))

        if self.namespace is not None and (why := text_problem(self.namespace)):
            fail("$.namespace", f"a namespace ({why})", self.namespace)
        skill_versions = _mapping(self.skill_versions, "$.skill_versions", "an object of skill ids to major versions", fail)
        for skill in skill_versions:
            if not isinstance(skill, str):
                fail(f"$.skill_versions[{skill!r}]", "a skill id (a string)", skill)
        for path, version in [("$.capability_version", self.capability_version),
                              *((json_path("$.skill_versions", k), v) for k, v in skill_versions.items()
                                if isinstance(k, str))]:
            if version is not None and not _is_version(version):
                fail(path, "a major version (an integer from 0 to 2^63-1)", version)
        for i, pair in enumerate(_items(self.capabilities, "$.capabilities", "an array of (name, version) pairs", fail)):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                fail(f"$.capabilities[{i}]", "a (name, version) pair", pair)
                continue
            name, version = pair
            if not is_identifier(name):
                fail(f"$.capabilities[{i}].name", "a capability identifier (§2)", name)
            if not _is_version(version):
                fail(f"$.capabilities[{i}].version", "a major version (an integer from 0 to 2^63-1)", version)
        for i, clearance in enumerate(_items(self.clearances, "$.clearances", "an array of clearances", fail)):
            if not is_identifier(clearance):
                fail(f"$.clearances[{i}]", IDENTIFIER_TEXT, clearance)
        grants = _mapping(self.grants, "$.grants", "an object of agent names to arrays of clearances", fail)
        for agent, granted in grants.items():
            where = json_path("$.grants", agent) if isinstance(agent, str) else f"$.grants[{agent!r}]"
            if not isinstance(agent, str):
                fail(where, "an agent name (a string)", agent)
            for i, clearance in enumerate(_items(granted, where, "an array of clearances", fail)):
                if not is_identifier(clearance):
                    fail(f"{where}[{i}]", IDENTIFIER_TEXT, clearance)
        residency = None if self.residency is None else _items(self.residency, "$.residency",
                                                               "an array of residency labels", fail)
        for i, label in enumerate(residency or ()):
            if why := text_problem(label):
                fail(f"$.residency[{i}]", f"a residency label ({why})", label)
        if self.latency_class is not None and self.latency_class not in LATENCY_CLASSES:
            fail("$.latency_class", " or ".join(f'"{c}"' for c in LATENCY_CLASSES), self.latency_class)
        if self.cost_ceiling_usd is not None and not (
                isinstance(self.cost_ceiling_usd, str) and DECIMAL.fullmatch(self.cost_ceiling_usd)):
            fail("$.cost_ceiling_usd", 'a decimal string such as "0.75"', self.cost_ceiling_usd)
        for flag in ("normalise", "derive_namespace"):
            if not isinstance(getattr(self, flag), bool):
                fail(f"$.{flag}", "true or false", getattr(self, flag))
        if self.skill_domain is not None and not (isinstance(self.skill_domain, str) and is_domain(self.skill_domain)):
            fail("$.skill_domain", "a domain such as travel or acme.travel (lowercase, dot-separated; "
                                   "the first segment without hyphens)", self.skill_domain)
        if problems:
            raise SchemaError(problems, "supplied")
        return self

    def version_for(self, skill_id: str) -> int | None:
        """The major version the caller gives a skill, or None if it gave none."""
        return self.skill_versions.get(skill_id, self.capability_version)

    def fill(self, doc: dict[str, Any], name: str, origin: str) -> tuple[list[str], list[tuple[str, str]]]:
        """Set `doc`'s clearances, residency and model from what the caller supplied.

        Returns (fields supplied, [(field not derived, why)]); `origin` names the source kind in
        the reasons ("an Agent Card", "a tool listing").
        """
        supplied: list[str] = []
        missing: list[tuple[str, str]] = []
        granted = self.grants.get(name, ())
        doc["clearances"] = list(dict.fromkeys((*self.clearances, *granted)))
        if self.clearances:
            supplied.append("clearances (granted to every agent)")
        if granted:
            supplied.append("clearances (grants file)")
        if not doc["clearances"]:
            missing.append(("clearances", f"{origin} cannot grant authority (A3 §8: clearances are "
                                          f"sourced elsewhere) and none was supplied: the agent "
                                          f"holds none"))
        if self.residency is not None:
            doc["residency"] = list(self.residency)
            supplied.append("residency")
        else:
            missing.append(("residency", f"{origin} does not say where the agent runs; absent "
                                         f"means unconstrained (§3)"))
        model: dict[str, str] = {}
        if self.latency_class is not None:
            model["latency_class"] = self.latency_class
            supplied.append("model.latency_class")
        if self.cost_ceiling_usd is not None:
            model["cost_ceiling_usd"] = self.cost_ceiling_usd
            supplied.append("model.cost_ceiling_usd")
        if model:
            doc["model"] = model
        else:
            missing.append(("model", f"{origin} does not say which model serves the agent or "
                                     f"its cost; a task that asks for a latency class will not "
                                     f"match it"))
        return supplied, missing


def _items(value: Any, path: str, expected: str, fail: Callable[[str, str, Any], None]) -> list[Any]:
    """The elements of a list or tuple field; anything else is a problem (and no elements)."""
    if isinstance(value, (list, tuple)):
        return list(value)
    fail(path, expected, value)
    return []


def _mapping(value: Any, path: str, expected: str, fail: Callable[[str, str, Any], None]) -> Mapping[Any, Any]:
    if isinstance(value, Mapping):
        return value
    fail(path, expected, value)
    return {}


def _is_version(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_VERSION


def read_grants(obj: Any, source: str) -> dict[str, tuple[str, ...]]:
    """A grants file: `{"<agent name>": ["<clearance>", ...], ...}` — who was granted what.

    The clearances come from the grantor, not from the agent's own card (§8); each must be a §2
    identifier. Raises SchemaError naming the file and the JSON path of every bad entry.
    """
    problems: list[Problem] = []
    if not isinstance(obj, Mapping):
        raise SchemaError([Problem("$", "an object mapping agent names to arrays of clearances",
                                   describe(obj))], source)
    grants: dict[str, tuple[str, ...]] = {}
    for agent, granted in obj.items():
        path = json_path("$", agent)
        if why := text_problem(agent):
            problems.append(Problem(path, f"an agent name ({why})", describe(agent)))
            continue
        if not isinstance(granted, list):
            problems.append(Problem(path, "an array of clearance identifiers", describe(granted)))
            continue
        good = []
        for i, clearance in enumerate(granted):
            if is_identifier(clearance):
                good.append(clearance)
            else:
                problems.append(Problem(f"{path}[{i}]", IDENTIFIER_TEXT, describe(clearance)))
        grants[agent] = tuple(dict.fromkeys(good))
    if problems:
        raise SchemaError(problems, source)
    return grants

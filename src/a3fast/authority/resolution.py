"""Skill resolution (portable-authority "Portable skills", "From semantic contract to concrete tool").

A skill is available when every required capability is in the effective authority *and* mapped to
a tool on this host; it then carries its bindings, plus whichever optional capabilities resolve
too. An unavailable skill names each unmet requirement and every reason it is unmet.

The skill index is the transpose of the skills: one bitset per capability of the skills that
require it, like the matcher's one bitset per predicate of the agents that satisfy it. Resolving
every skill is then: usable = effective & mapped; unavailable = OR of the bitsets of the required
capabilities that are not usable — one OR per unusable capability, however many skills there are.
Details (bindings, reasons) are built only for the skills a caller looks at.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Iterator, Mapping, Sequence

from . import reasons as R
from .catalog import Catalog
from .documents import (Connection, Contract, HostMapping, RuntimePolicy, Skill, parse_connection,
                        parse_contracts, parse_mappings, parse_policy, parse_skills)
from .effective import CONFIRM, DENIED, Authority, effective_authority
from .times import DEFAULT_SKEW_SECONDS
from .vocabulary import Vocabulary, bits_to_ids

__all__ = ["Binding", "Unmet", "SkillResolution", "HostTools", "SkillIndex", "Resolution", "Resolver", "resolve"]


@dataclass(frozen=True, slots=True)
class Binding:
    """A resolved capability: the host tool that performs it, and why each use needs confirming (if so)."""

    capability: str
    tool: str
    transport: str
    confirmation: tuple[R.Reason, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"capability": self.capability, "tool": self.tool, "transport": self.transport}
        if self.confirmation:
            out["confirmation"] = [r.to_dict() for r in self.confirmation]
        return out


@dataclass(frozen=True, slots=True)
class Unmet:
    """A capability that does not resolve, with every reason (a boundary's, or no host mapping)."""

    capability: str
    reasons: tuple[R.Reason, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"capability": self.capability, "reasons": [r.to_dict() for r in self.reasons]}


@dataclass(frozen=True, slots=True)
class SkillResolution:
    """One skill's result: available or not; its required capabilities split into bound and unmet;
    its optional capabilities likewise (they never make a skill unavailable)."""

    skill: str
    available: bool
    bindings: tuple[Binding, ...]
    unmet: tuple[Unmet, ...]
    optional: tuple[Binding, ...]
    optional_unmet: tuple[Unmet, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"skill": self.skill, "available": self.available,
                "bindings": [b.to_dict() for b in self.bindings], "unmet": [u.to_dict() for u in self.unmet],
                "optional": [b.to_dict() for b in self.optional],
                "optional_unmet": [u.to_dict() for u in self.optional_unmet]}


class HostTools:
    """This host's mappings by capability; the first mapping listed for a capability is the one bound."""

    def __init__(self, mappings: Iterable[HostMapping], vocabulary: Vocabulary) -> None:
        self.by_capability: dict[str, HostMapping] = {}
        mapped = 0
        for mapping in mappings:
            if mapping.satisfies not in self.by_capability:
                self.by_capability[mapping.satisfies] = mapping
                mapped |= 1 << vocabulary.intern(mapping.satisfies)
        self.mapped = mapped

    def get(self, key: str) -> HostMapping | None:
        return self.by_capability.get(key)


class SkillIndex:
    """Skills in order, and per capability the bitset (over skill positions) of skills requiring it."""

    def __init__(self, skills: Sequence[Skill], vocabulary: Vocabulary) -> None:
        self.skills = tuple(skills)
        self.position = {skill.id: i for i, skill in enumerate(self.skills)}
        if len(self.position) != len(self.skills):
            raise ValueError("skill ids must be unique")
        requiring: list[int] = []
        needed = 0
        for i, skill in enumerate(self.skills):
            bit = 1 << i
            for key in skill.required:
                cid = vocabulary.intern(key)
                if cid >= len(requiring):
                    requiring.extend([0] * (cid + 1 - len(requiring)))
                requiring[cid] |= bit
                needed |= 1 << cid
            for key in skill.optional:
                vocabulary.intern(key)  # so that the authority explains optional capabilities too
        self.requiring = requiring
        self.needed = needed
        self.all = (1 << len(self.skills)) - 1

    def available(self, usable: int) -> int:
        """The skills (bitset over positions) whose every required capability is in `usable`."""
        requiring = self.requiring
        unavailable = 0
        for cid in bits_to_ids(self.needed & ~usable):
            unavailable |= requiring[cid]
        return self.all & ~unavailable


class Resolution:
    """Every skill resolved against one effective authority and one host; details on demand."""

    def __init__(self, index: SkillIndex, authority: Authority, host: HostTools) -> None:
        self.index = index
        self.authority = authority
        self.host = host
        self.usable = authority.effective & host.mapped
        self.available = index.available(self.usable)
        self._outcomes: dict[str, Binding | Unmet] = {}

    def __len__(self) -> int:
        return len(self.index.skills)

    def is_available(self, skill_id: str) -> bool:
        return (self.available >> self.index.position[skill_id]) & 1 == 1

    def available_skills(self) -> list[str]:
        return [self.index.skills[i].id for i in bits_to_ids(self.available)]

    def unavailable_skills(self) -> list[str]:
        return [self.index.skills[i].id for i in bits_to_ids(self.index.all & ~self.available)]

    def skill(self, skill_id: str) -> SkillResolution:
        """One skill's bindings and unmet requirements; KeyError for a skill not in the index."""
        i = self.index.position[skill_id]
        skill = self.index.skills[i]
        bindings, unmet = self._split(skill.required)
        optional, optional_unmet = self._split(skill.optional)
        return SkillResolution(skill.id, (self.available >> i) & 1 == 1, bindings, unmet, optional, optional_unmet)

    def __iter__(self) -> Iterator[SkillResolution]:
        for skill in self.index.skills:
            yield self.skill(skill.id)

    def _split(self, keys: Sequence[str]) -> tuple[tuple[Binding, ...], tuple[Unmet, ...]]:
        outcomes = [self._outcome(key) for key in keys]
        return (tuple(o for o in outcomes if isinstance(o, Binding)),
                tuple(o for o in outcomes if isinstance(o, Unmet)))

    def _outcome(self, key: str) -> Binding | Unmet:
        """What one capability resolves to here; the same for every skill, so worked out once."""
        outcome = self._outcomes.get(key)
        if outcome is not None:
            return outcome
        grant = self.authority.grant(key)
        mapping = self.host.get(key)
        if grant.status != DENIED and mapping is not None:
            confirmation = grant.reasons if grant.status == CONFIRM else ()
            outcome = Binding(key, mapping.tool, mapping.transport, confirmation)
        else:
            why = list(grant.reasons) if grant.status == DENIED else []
            if mapping is None:
                why.append(R.Reason(R.NO_MAPPING, R.HOST, "no host mapping: no tool on this host satisfies it"))
            outcome = Unmet(key, tuple(why))
        self._outcomes[key] = outcome
        return outcome


def _parsed(values: Sequence[Any], kind: type, parse) -> tuple:
    """Documents as given, or parsed when they are not yet (all or nothing)."""
    values = list(values)
    return tuple(values) if all(isinstance(v, kind) for v in values) else parse(values)


class Resolver:
    """A host's contracts, mappings and skills, interned once; resolves them against any connection,
    engagement and runtime policy. Dicts are parsed (SchemaError on bad ones)."""

    def __init__(self, contracts: Sequence[Contract | Mapping], mappings: Sequence[HostMapping | Mapping],
                 skills: Sequence[Skill | Mapping]) -> None:
        self.vocabulary = Vocabulary()
        self.catalog = Catalog(_parsed(contracts, Contract, parse_contracts), self.vocabulary)
        self.host = HostTools(_parsed(mappings, HostMapping, parse_mappings), self.vocabulary)
        self.index = SkillIndex(_parsed(skills, Skill, parse_skills), self.vocabulary)

    def authority(self, connection: Connection | Mapping, engagement: Any, policy: RuntimePolicy | Mapping, *,
                  now: datetime | str | None = None, skew_seconds: int = DEFAULT_SKEW_SECONDS,
                  context: str | None = None) -> Authority:
        """connection ∩ engagement ∩ runtime at `now`, in the host's operating `context` (see
        `effective_authority`)."""
        if not isinstance(connection, Connection):
            connection = parse_connection(connection)
        if not isinstance(policy, RuntimePolicy):
            policy = parse_policy(policy)
        return effective_authority(self.catalog, connection, engagement, policy, now=now, skew_seconds=skew_seconds,
                                   context=context)

    def resolve(self, connection: Connection | Mapping, engagement: Any, policy: RuntimePolicy | Mapping, *,
                now: datetime | str | None = None, skew_seconds: int = DEFAULT_SKEW_SECONDS,
                context: str | None = None) -> Resolution:
        """Every skill, resolved against the effective authority at `now` (in `context`) and this
        host's tools."""
        authority = self.authority(connection, engagement, policy, now=now, skew_seconds=skew_seconds,
                                   context=context)
        return Resolution(self.index, authority, self.host)


def resolve(contracts: Sequence[Contract | Mapping], mappings: Sequence[HostMapping | Mapping],
            skills: Sequence[Skill | Mapping], connection: Connection | Mapping, engagement: Any,
            policy: RuntimePolicy | Mapping, *, now: datetime | str | None = None,
            skew_seconds: int = DEFAULT_SKEW_SECONDS, context: str | None = None) -> Resolution:
    """One-shot resolution; a caller that resolves the same skills often keeps a `Resolver`."""
    return Resolver(contracts, mappings, skills).resolve(connection, engagement, policy, now=now,
                                                          skew_seconds=skew_seconds, context=context)

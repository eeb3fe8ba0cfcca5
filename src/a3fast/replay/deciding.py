"""Placing a recorded task again on one fleet: over the candidates it was offered, with its session,
a resumption on wherever its task went; and the fleet a replay places on (a copy, new weights)."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Mapping, Sequence

from ..errors import describe
from ..fleet import Fleet
from ..fleet.placement import Placement, Route, RouteError
from ..fleet.scoring import COMPONENTS, check_total_bound
from .explaining import first_failed_on
from .reading import OFFERED_NAMES_KEPT, Recorded
from .verdict import RouteReplayError

__all__ = ["Side", "Decision", "copy_fleet", "parse_weights"]


class Decision:
    """One task decided on one side: the chosen agent (None when rejected), and the Placement when
    the task was placed in full (it then holds its session already)."""

    __slots__ = ("agent", "placement", "within", "fails")

    def __init__(self, agent: str | None, placement: Placement | None, within: list[str] | None,
                 fails: str | None = None):
        self.agent = agent
        self.placement = placement
        self.within = within
        #: a resumption's agent's first failed predicate (or NOT_IN_FLEET) when it cannot resume
        self.fails = fails


class Side:
    """A fleet the trace's tasks are placed on, in trace order, as `Fleet.place` places them.

    Each placement is offered what its record says it was offered: the recorded candidates found in
    this fleet (the whole fleet when the record lists none). `new` is the set of agents counted as
    new to a placement — None for "this fleet's agents the record does not list" — and with
    `offer_new` they are offered too. A resumption goes to wherever this side placed the task it
    resumes (`moved` keeps each bound placement this side decided otherwise than recorded)."""

    def __init__(self, fleet: Any, route: Route | None, *, offer_new: bool = False,
                 new: frozenset[str] | None = None):
        self.fleet = fleet
        self.route = route
        self.offer_new = offer_new
        self.new = new
        self.moved: dict[int, str | None] = {}
        self._within: dict[int, tuple[list[str] | None, frozenset[str]]] = {}
        self._within_names = 0
        # A Fleet answers the decision without building a Placement (`Fleet.scored`: prepare,
        # explain, score, choose — what `place` runs, the same winner); other fleets place.
        is_fleet = isinstance(fleet, Fleet)
        self._scored = fleet.scored if is_fleet and route is None else None
        self._name_of = fleet.index.name if is_fleet else None
        self._live: frozenset[str] | None = None

    def live(self) -> frozenset[str]:
        if self._live is None:
            self._live = frozenset(self.fleet.names())
        return self._live

    def offered(self, recorded: Recorded) -> tuple[list[str] | None, frozenset[str]]:
        """The candidates to place over (None: the whole fleet), and the agents new to the placement
        that are not offered it (for `offered_new`)."""
        token = recorded.offered
        if token is None:
            return None, frozenset()
        found = self._within.get(token[0])
        if found is None:
            if self._within_names + len(token[1]) > OFFERED_NAMES_KEPT:
                self._within.clear()        # held to the reader's bound (a3fast.replay.reading)
                self._within_names = 0
            found = self._within[token[0]] = self._resolve(token[1])
            self._within_names += len(token[1])
        return found

    def _resolve(self, names: Sequence[str]) -> tuple[list[str] | None, frozenset[str]]:
        live = self.live()
        listed = frozenset(names)
        within = [n for n in names if n in live]
        new = (live - listed) if self.new is None else (self.new - listed)
        if self.offer_new:
            within += sorted(new)
            new = frozenset()
        return (None if live <= set(within) else within), new

    def decide(self, recorded: Recorded) -> Decision:
        """Decide a (not resumed) task; nothing in the fleet changes unless it was placed in full."""
        within, _ = self.offered(recorded)
        scored = self._scored
        if scored is not None:
            best = scored(recorded.requirements, recorded.session, candidates=within).best
            return Decision(self._name_of(best) if best >= 0 else None, None, within)  # type: ignore[misc]
        p = self._place(recorded, within)
        return Decision(p.agent, p, within)

    def new_winner(self, recorded: Recorded) -> str | None:
        """An agent new to the placement and not offered it that would have won had it been."""
        within, new = self.offered(recorded)
        if not new:
            return None
        candidates = None if within is None else [*within, *sorted(new)]
        if self._scored is not None:
            best = self._scored(recorded.requirements, recorded.session, candidates=candidates).best
            agent = self._name_of(best) if best >= 0 else None  # type: ignore[misc]
        else:
            agent = self.fleet.place(recorded.requirements, recorded.session, route=self.route,
                                     candidates=candidates, remember_session=False).agent
        return agent if agent in new else None

    def settle(self, recorded: Recorded, decision: Decision) -> None:
        """Make the decision's agent hold the task's session, as `place` does for a bound placement."""
        agent, session = decision.agent, recorded.session
        if decision.placement is None and agent is not None and session is not None and recorded.holds \
                and not self.fleet.holds_session(agent, session):
            self.fleet.hold_session(agent, session)
        self.note(recorded, agent)

    def place(self, recorded: Recorded, decision: Decision) -> Placement:
        """The decision as a Placement (placing it in full once), for explaining a change."""
        if decision.placement is None:
            decision.placement = self._place(recorded, decision.within)
        self.note(recorded, decision.placement.agent)
        return decision.placement

    def note(self, recorded: Recorded, agent: str | None) -> None:
        if recorded.kind == "task.bound" and agent != recorded.agent:
            self.moved[recorded.seq] = agent

    def _place(self, recorded: Recorded, within: list[str] | None) -> Placement:
        try:
            return self.fleet.place(recorded.requirements, recorded.session, route=self.route, candidates=within,
                                    remember_session=recorded.holds)
        except RouteError as exc:
            raise RouteReplayError(f"seq {recorded.seq}: {exc}") from None

    def resume(self, recorded: Recorded) -> tuple[Decision, Any]:
        """A resumption (§6: no candidates weighed) on the agent this side placed its task on: kept
        there if the agent is in this fleet and satisfies every matched predicate (what
        `Fleet.resume` checks), else it cannot resume. Returns the decision and the matched
        requirements."""
        try:
            matched = self.route.apply(recorded.requirements) if self.route is not None else recorded.requirements
        except RouteError as exc:
            raise RouteReplayError(f"seq {recorded.seq}: {exc}") from None
        ref = recorded.resumes
        agent = self.moved[ref] if ref is not None and ref in self.moved else recorded.agent
        if agent is None:   # its task is not placed on this side: say what its recorded agent fails here
            return Decision(None, None, None, fails=first_failed_on(self.fleet, recorded.agent, matched.predicates)
                            if recorded.agent is not None else None), matched
        unmet = first_failed_on(self.fleet, agent, matched.predicates)
        if unmet is not None:
            return Decision(None, None, None, fails=unmet), matched
        return Decision(agent, None, None), matched

    def follows_change(self, recorded: Recorded) -> bool:
        """Whether a resumption's task was placed otherwise on this side than recorded."""
        return recorded.resumes is not None and recorded.resumes in self.moved


def copy_fleet(fleet: Any) -> Any:
    """An independent copy of a fleet (agents, outcomes, sessions, weights, scorer), through its
    snapshot: a replay holds sessions on the copy, never on the fleet it was given. The snapshot
    goes to memory-backed /dev/shm where there is one and it has room (the file is read back at
    once and removed, so forcing it to disk would only cost), else to the temporary directory."""
    places = ["/dev/shm", None] if os.path.isdir("/dev/shm") else [None]
    for i, place in enumerate(places):
        fd, tmp = tempfile.mkstemp(prefix=".a3fast-replay.", suffix=".snapshot", dir=place)
        os.close(fd)
        try:
            fleet.save(tmp)
            return type(fleet).load(tmp, engine=fleet.engine, scorer=fleet.scorer)
        except OSError:
            if i == len(places) - 1:
                raise
        finally:
            os.unlink(tmp)
    raise AssertionError("unreachable")


    raise AssertionError("unreachable")


def parse_weights(value: Any, base: Sequence[float]) -> tuple[float, ...] | None:
    """Weights of the default scorer's components from four numbers ("0.4,0.3,0.2,0.1" or a list), a
    mapping or NAME=VALUE pairs ("cost=0.5,affinity=0.2", the others kept from `base`); None for
    None. ValueError names what is wrong."""
    if value is None:
        return None
    pairs: Mapping[str, Any] | None = None
    numbers: list[Any] | None = None
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if parts and all("=" in p for p in parts):
            pairs = dict(p.split("=", 1) for p in parts)
        elif any("=" in p for p in parts):
            raise ValueError(f"weights: expected four numbers or NAME=VALUE pairs, not both, found {value!r}")
        else:
            numbers = parts
    elif isinstance(value, Mapping):
        pairs = value
    elif isinstance(value, (list, tuple)):
        numbers = list(value)
    else:
        raise ValueError(f"weights: expected four numbers or NAME=VALUE pairs, found {value!r}")
    if pairs is not None:
        weights = list(base)
        for name, number in pairs.items():
            name = str(name).strip()
            if name not in COMPONENTS:
                raise ValueError(f"weights: unknown component {name!r} (components: {', '.join(COMPONENTS)})")
            weights[COMPONENTS.index(name)] = _weight(number, name)
        check_total_bound(weights)
        return tuple(weights)
    assert numbers is not None
    if len(numbers) != len(COMPONENTS):
        raise ValueError(f"weights: expected {len(COMPONENTS)} numbers ({', '.join(COMPONENTS)}), "
                         f"found {len(numbers)}")
    parsed = tuple(_weight(v, name) for v, name in zip(numbers, COMPONENTS))
    check_total_bound(parsed)
    return parsed


def _weight(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"weights: {name}: expected a number, found {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"weights: {name}: expected a number, found {describe(value)}") from None
    except OverflowError:       # an integer past any float (10**400)
        number = float("inf")
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"weights: {name}: expected a finite number, found {describe(value)}")
    return number


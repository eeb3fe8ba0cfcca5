"""What the benchmark measures: a3fast on each engine and the baselines, behind one interface.

Every subject answers the three tasks of the comparison for one prepared requirements object:
(a) `explain`: filter + first-failed explanation (§5);
(b) `place`: a whole placement with the default score, the record kept compact;
(c) `place_json`: a whole placement with the §6 scheduling JSON bytes produced.
Engines also answer `place_dict` (b from a requirements dict, parsing included),
`place_dict_compact` (the same with the placement's compact trace lines written, as a service
writes them), `place_dict_spec` (the same with its spec trace lines, a rejection's record and reason
included: what a service writes by default) and `place_repeated` (b for a task whose predicates were placed before on the same membership, whose
filter and explanation the fleet reuses). The benchmark times each task several times, so every
other engine scenario, (a) included, forgets that reuse after each call: it measures a task met
afresh. (a) is the engine's filter and explanation, the floor the placement targets are ratios
against; `Fleet.explain` reuses an explanation as every placement does, so without forgetting it
would time a lookup of the warm-up round's answer, about half the work (docs/performance.md, "The
explain row timed a reused explanation").
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ..fleet import Fleet
from ..record.compact import Encoder
from ..trace import placement_lines
from ..schema import Declaration, Requirements
from .baselines import BASELINES, Baseline

__all__ = ["SCENARIOS", "FROM_DICT", "Subject", "EngineSubject", "BaselineSubject", "build_subjects"]

#: scenario key -> label, in table order
SCENARIOS = {
    "explain": "(a) filter + first-failed explanation",
    "place": "(b) placement, record compact",
    "place_dict": "(b) placement from a requirements dict",
    "place_dict_compact": "(b) from a dict + its compact trace lines",
    "place_repeated": "(b) the same task again (explanation reused)",
    "place_json": "(c) placement + §6 JSON bytes",
    "place_dict_spec": "(c) from a dict + its spec trace lines",
}
#: the scenarios that take each task as its requirements dict (parsing timed); the rest take it prepared
FROM_DICT = ("place_dict", "place_dict_compact", "place_dict_spec")


class Subject:
    name: str
    is_engine: bool

    def task(self, scenario: str) -> Callable[[Any], Any] | None:
        """The callable for a scenario (it takes one task), or None if the subject has none."""
        return getattr(self, scenario, None)


class EngineSubject(Subject):
    """a3fast through its public API on one engine (gather through the prepared-requirements path)."""

    is_engine = True

    def __init__(self, engine: str, declarations: Sequence[Mapping[str, Any] | Declaration]):
        self.name = engine
        self.fleet = Fleet(engine=engine)
        self.fleet.extend(declarations)
        self.forget = self.fleet.forget_explanations
        self.encoder, self.seq = Encoder(), 1

    def explain(self, req: Requirements):
        explanation = self.fleet.explain(req)
        self.forget()
        return explanation

    def place(self, req: Requirements):
        placement = self.fleet.place(req, remember_session=False)
        self.forget()
        return placement

    def place_dict(self, doc: dict[str, Any]):
        placement = self.fleet.place(doc, remember_session=False)
        self.forget()
        return placement

    def place_dict_compact(self, doc: dict[str, Any]):
        placement = self.fleet.place(doc, remember_session=False)
        self.forget()
        lines, count = self.encoder.encode_placement_lines(self.seq, placement)
        self.seq += count
        return lines

    def place_dict_spec(self, doc: dict[str, Any]):
        placement = self.fleet.place(doc, remember_session=False)
        self.forget()
        lines, count = placement_lines(placement, self.seq)
        self.seq += count
        return lines

    def place_repeated(self, req: Requirements):
        return self.fleet.place(req, remember_session=False)

    def place_json(self, req: Requirements):
        placement = self.fleet.place(req, remember_session=False)
        self.forget()
        return placement.scheduling_json()


class BaselineSubject(Subject):
    is_engine = False

    def __init__(self, baseline: Baseline):
        self.name = baseline.name
        self.baseline = baseline
        self.explain = baseline.explain
        self.place = baseline.place
        self.place_json = baseline.scheduling_json


def build_subjects(declarations: Sequence[Mapping[str, Any] | Declaration], engines: Sequence[str],
                   baselines: Sequence[type[Baseline]] = BASELINES) -> list[Subject]:
    subjects: list[Subject] = [EngineSubject(engine, declarations) for engine in engines]
    subjects += [BaselineSubject(cls(declarations)) for cls in baselines]
    return subjects

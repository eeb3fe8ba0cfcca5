"""A trace read into what a report shows: totals, predicate tallies, placements over time, the §7
findings, and per placement its funnel, scores and candidates — kept small enough to embed.

One pass over the records: each placement record is decoded (compact records too), summarised and
dropped, and the verifier is fed the same records, so memory grows with the placements kept in
detail (bounded by `Limits`), not with the trace.
"""
from __future__ import annotations

import collections
import datetime as _dt
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..fleet.scoring import COMPONENTS, DEFAULT_WEIGHTS

from ..explain import ExplainError, Explained, explain_record, predicate_counts
from ..files import shown_text
from ..record.compact import CompactError, Decoder
from ..trace import TraceContentError, TraceItem, TraceProblem, TraceRecord, read_trace, read_values
from ..verify import Finding, Verifier
from .views import summary_html, view_html

__all__ = ["Limits", "PlacementView", "TraceSummary", "ReportInputError", "summarise_trace",
           "summarise_items", "decisive_predicate", "ELIGIBLE"]

#: The first-failed column of a candidate that failed nothing.
ELIGIBLE = None


class ReportInputError(ValueError):
    """The records cannot be read as a trace: every problem, each naming where and what."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class Limits:
    """What a report embeds at most; everything beyond is counted in the totals but not listed."""

    #: placements with funnel, scores and candidate table (the first ones, plus any with a finding)
    detailed_placements: int = 1_000
    #: candidate rows per detailed placement: the first in candidate order, at most as many of the
    #: eligible past them, and the chosen agent wherever it is
    candidates_per_placement: int = 2_000
    #: eligible agents whose score components are charted per placement (highest totals first)
    scores_per_placement: int = 20
    #: rows of the placement list (seq, verdict), plus any placement with a finding; the totals and
    #: charts still count every placement
    listed_placements: int = 20_000
    #: bars per trace-wide predicate chart
    predicates_charted: int = 15
    #: bins of the placements-over-time chart
    time_bins: int = 60


@dataclass
class PlacementView:
    """One task.bound or task.rejected record as the report shows it."""

    seq: int
    kind: str
    line: int | None
    summary: str
    chosen: str | None
    candidates: int
    predicates: tuple[str, ...]
    removed: tuple[int, ...]
    decided_at: str | None = None
    reason: str | None = None
    #: score component names, and (agent, total, components...) rows, highest total first
    score_components: tuple[str, ...] = ()
    score_rows: list[tuple] = field(default_factory=list)
    #: the weight of each component in the total (what the chart stacks: weight × component), or
    #: None when the totals are not a weighted sum of the components the record gives
    score_weights: tuple[float, ...] | None = None
    scored: int = 0
    #: (agent, the first predicate it failed or None when eligible), capped by Limits
    rows: list[tuple[str, str | None]] | None = None

    @property
    def eligible(self) -> int:
        return self.candidates - sum(self.removed)

    @property
    def bound(self) -> bool:
        return self.kind == "task.bound"

    @property
    def reached(self) -> tuple[int, ...]:
        return tuple(c.reached for c in predicate_counts(self.candidates, self.predicates, self.removed))

    @property
    def funnel(self) -> list[tuple[str, int, int]]:
        """(predicate, reached, removed) in derivation order."""
        return [(c.predicate, c.reached, c.removed)
                for c in predicate_counts(self.candidates, self.predicates, self.removed)]

    def failed_counts(self) -> dict[str, int]:
        """Predicate -> candidates that failed it first, as `Placement.failed_counts()` gives it."""
        return dict(zip(self.predicates, self.removed))

    @property
    def rows_capped(self) -> bool:
        return self.rows is not None and len(self.rows) < self.candidates

    def _repr_html_(self) -> str:
        return view_html(self)


@dataclass
class TraceSummary:
    """Everything a report shows about one trace."""

    source: str
    limits: Limits
    records: int = 0
    placements: int = 0
    bound: int = 0
    unschedulable: int = 0
    #: placement records that hold no explanation (resumed placements, foreign records, and the
    #: malformed ones below)
    unexplained: int = 0
    #: (seq, line, what is wrong) of each placement whose §6 lists are not of their shape: shown as
    #: an E_STRUCTURE finding, as `a3fast verify` reports it
    malformed: list[tuple[int, int | None, str]] = field(default_factory=list)
    removed_by_predicate: collections.Counter = field(default_factory=collections.Counter)
    unschedulable_by_predicate: collections.Counter = field(default_factory=collections.Counter)
    #: (decided_at as datetime, bound) of every explained placement with a readable timestamp
    decided: list[tuple[_dt.datetime, bool]] = field(default_factory=list)
    listed: list[PlacementView] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    #: seq -> kind of every record a finding names
    finding_kinds: dict[int, str] = field(default_factory=dict)

    @property
    def detailed(self) -> list[PlacementView]:
        return [p for p in self.listed if p.rows is not None]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.is_error]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if not f.is_error]

    def placement(self, seq: int) -> PlacementView | None:
        return next((p for p in self.listed if p.seq == seq), None)

    def _repr_html_(self) -> str:
        return summary_html(self)


def decisive_predicate(explained: Explained) -> str | None:
    """The predicate that removed the last candidates of an unschedulable task (None: no candidates)."""
    remaining = explained.candidates
    for predicate, count in zip(explained.predicates, explained.failed_counts):
        remaining -= count
        if remaining == 0 and count:
            return predicate
    return None


def parse_decided_at(text: Any) -> _dt.datetime | None:
    """§6 `decided_at` (RFC 3339, UTC 'Z' or an offset) as an aware datetime in UTC; None when
    unreadable, or when its instant falls outside the years 1–9999 in UTC (0001-01-01T00:30+01:00),
    which no datetime holds — `timings` is informational (§6), so such a placement is only left
    out of the time chart."""
    if not isinstance(text, str):
        return None
    try:
        value = _dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=_dt.timezone.utc)
    try:
        return value.astimezone(_dt.timezone.utc)
    except OverflowError:
        return None


def summarise_trace(source: Any, *, name: str | None = None, limits: Limits = Limits(),
                    progress: Callable[[int], None] | None = None, allow_empty: bool = True) -> TraceSummary:
    """Read a trace — a path, bytes, a binary file, or an iterable of records `{seq, kind, content}`
    (spec or compact form) — into a TraceSummary. ReportInputError when it breaks the trace format,
    or, unless `allow_empty`, when it holds no record (a live trace may have none yet; a file of
    none is no trace, as `a3fast verify` says). `progress(n)` is told of every n bytes read (a
    trace read from bytes, a path or a file)."""
    if isinstance(source, (str, bytes, bytearray, memoryview)) or hasattr(source, "read") or \
            hasattr(source, "__fspath__"):
        items: Iterable[TraceItem] = read_trace(source, progress)
        label = name or (shown_text(os.fspath(source)) if isinstance(source, str) or hasattr(source, "__fspath__")
                         else "trace")
    else:
        items = read_values(source)
        label = name or "trace"
    return summarise_items(items, name=label, limits=limits, allow_empty=allow_empty)


def summarise_items(items: Iterable[TraceItem], *, name: str, limits: Limits = Limits(),
                    allow_empty: bool = True) -> TraceSummary:
    summary = TraceSummary(source=name, limits=limits)
    verifier = Verifier()
    decoder = Decoder()
    problems: list[str] = []
    kinds: dict[int, str] = {}
    detailed = 0
    for item in _checked(items, problems, name):
        seen = len(verifier.findings)
        verifier.feed(item)
        summary.records += 1
        if item.kind not in ("task.bound", "task.rejected"):
            if len(verifier.findings) > seen:
                kinds[item.seq] = item.kind
            continue
        try:
            content = decoder.decode_content(item.seq, item.kind, item.content)
        except (TraceContentError, CompactError) as exc:
            problems.append(f"{name}: {_where(item)}: {exc}")
            continue
        summary.placements += 1
        has_finding = len(verifier.findings) > seen
        if has_finding:
            kinds[item.seq] = item.kind
        try:
            explained = explain_record(item.seq, item.kind, content)
        except ExplainError as exc:
            # malformed in structure, not a broken trace: the page shows it as a finding
            explained = None
            summary.malformed.append((item.seq, item.line, str(exc)))
            kinds[item.seq] = item.kind
        if item.kind == "task.bound":
            summary.bound += 1
        else:
            summary.unschedulable += 1
        if explained is None:
            summary.unexplained += 1
            continue
        _tally(summary, explained, content)
        # a placement with a finding is listed past the limit too: the finding links to it
        if len(summary.listed) >= limits.listed_placements and not has_finding:
            continue
        view = _view(item, explained, content)
        if detailed < limits.detailed_placements or has_finding:
            detailed += detailed < limits.detailed_placements
            _detail(view, explained, content, limits)
        summary.listed.append(view)
    if not problems and not summary.records and not allow_empty:
        problems.append(f"{name}: unreadable: no records (the input is empty)")
    if problems:
        raise ReportInputError(problems)
    summary.findings = _with_structure_findings(verifier.finish(), summary.malformed)
    summary.finding_kinds = {f.seq: kinds[f.seq] for f in summary.findings if f.seq in kinds}
    return summary


def _with_structure_findings(findings: list[Finding], malformed: list[tuple[int, int | None, str]]) -> list[Finding]:
    """The verifier's findings, and an E_STRUCTURE finding for each malformed placement it did not
    already name with one, placed in seq order."""
    if not malformed:
        return findings
    named = {f.seq for f in findings if f.code == "E_STRUCTURE"}
    extra = [Finding("E_STRUCTURE", seq, f"the placement cannot be explained: {message}", line)
             for seq, line, message in malformed if seq not in named]
    if not extra:
        return findings
    return sorted(findings + extra, key=lambda f: (f.seq is None, f.seq if f.seq is not None else 0))


def _checked(items: Iterable[TraceItem], problems: list[str], name: str) -> Iterator[TraceRecord]:
    """The readable records; a break of the trace format is a problem (nothing to report on)."""
    try:
        for item in items:
            if isinstance(item, TraceProblem):
                problems.append(f"{name}: {item.where}: {item.message}")
            else:
                yield item
    except OSError as exc:
        problems.append(f"{name}: cannot read: {exc.strerror or exc}")


def _where(item: TraceRecord) -> str:
    return f"line {item.line}" if item.line is not None else f"seq {item.seq}"


def _scheduling(kind: str, content: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = content.get("scheduling") if kind == "task.bound" else content
    return inner if isinstance(inner, Mapping) else {}


def _tally(summary: TraceSummary, explained: Explained, content: Mapping[str, Any]) -> None:
    for predicate, count in zip(explained.predicates, explained.failed_counts):
        if count:
            summary.removed_by_predicate[predicate] += count
    if explained.kind == "task.rejected":
        summary.unschedulable_by_predicate[decisive_predicate(explained) or "(no candidates)"] += 1
    timings = _scheduling(explained.kind, content).get("timings")
    decided = parse_decided_at(timings.get("decided_at")) if isinstance(timings, Mapping) else None
    if decided is not None:
        summary.decided.append((decided, explained.kind == "task.bound"))


def _view(item: TraceRecord, explained: Explained, content: Mapping[str, Any]) -> PlacementView:
    timings = _scheduling(item.kind, content).get("timings")
    decided_at = timings.get("decided_at") if isinstance(timings, Mapping) else None
    return PlacementView(seq=item.seq, kind=item.kind, line=item.line, summary=explained.summary(),
                         chosen=explained.chosen, candidates=explained.candidates,
                         predicates=explained.predicates, removed=explained.failed_counts,
                         decided_at=decided_at if isinstance(decided_at, str) else None,
                         reason=explained.reason)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def score_weights(components: list[str], rows: list[tuple]) -> tuple[float, ...] | None:
    """The weights that make every row's total the weighted sum of its components — a record names
    the components and the total, not the scorer's weights. The default scorer's weights when they
    fit (docs/design.md, reading 15: the total is their weighted sum), else the weights that fit every row
    exactly by least squares (as after `--weights`), else None (a scorer whose total is no weighted
    sum, or too few rows to tell)."""
    rows = [r for r in rows if all(v is not None for v in r)]
    if not components or not rows:
        return None

    def fits(weights) -> bool:
        return all(abs(sum(w * v for w, v in zip(weights, r[1:])) - r[0]) <= 1e-9 * max(1.0, abs(r[0])) for r in rows)

    if tuple(components) == COMPONENTS and fits(DEFAULT_WEIGHTS):
        return tuple(DEFAULT_WEIGHTS)
    if len(rows) < len(components):
        return None
    import numpy as np

    matrix = np.array([r[1:] for r in rows], dtype=float)
    solved, *_ = np.linalg.lstsq(matrix, np.array([r[0] for r in rows], dtype=float), rcond=None)
    weights = tuple(float(w) for w in solved)
    # an exact fit whose shares are determined: a component that is 0 in every row gets weight 0
    # (its share is 0 whatever its weight), and the others must be independent
    used = int(np.count_nonzero(np.any(matrix != 0, axis=0)))
    if np.linalg.matrix_rank(matrix) < used or not fits(weights):
        return None
    return weights


def _detail(view: PlacementView, explained: Explained, content: Mapping[str, Any], limits: Limits) -> None:
    """Scores (top totals) and the candidate rows (eligible first), both capped by `limits`."""
    scores = explained.scores
    components: list[str] = []
    for entry in scores.values():
        if isinstance(entry, Mapping):
            components += [k for k, v in entry.items()
                           if k != "total" and k not in components and _number(v) is not None]
    def rank(kv: tuple[Any, Any]) -> tuple:
        # a total of 0 is a total like any other (it can be the highest); only no number ranks last
        total = _number(kv[1].get("total"))
        return (total is None, -total if total is not None else 0.0, str(kv[0]))

    ranked = sorted(((name, entry) for name, entry in scores.items() if isinstance(entry, Mapping)), key=rank)
    view.score_components = tuple(components)
    view.scored = len(ranked)
    view.score_rows = [(str(name), _number(entry.get("total")), *(_number(entry.get(c)) for c in components))
                       for name, entry in ranked[:limits.scores_per_placement]]
    view.score_weights = score_weights(components, [(_number(entry.get("total")),
                                                     *(_number(entry.get(c)) for c in components))
                                                    for _, entry in ranked])

    inner = _scheduling(explained.kind, content)
    candidates = [c for c in inner.get("candidates") or () if isinstance(c, str)]
    first: dict[str, Any] = {}  # candidate -> the predicate given, as the record has it
    for pair in inner.get("filters_failed") or ():
        if isinstance(pair, Mapping) and isinstance(pair.get("candidate"), str):
            first.setdefault(pair["candidate"], pair.get("predicate"))
    # The first candidates in candidate order (placements on one fleet then share one name list in
    # the page), and the eligible ones past the cap too, since they are what a reader looks for.
    # The eligible past the cap are bounded by the cap as well (a placement can have any number),
    # but the chosen agent is always kept: the table shows it on top.
    cap = limits.candidates_per_placement
    rows = [(c, first.get(c, ELIGIBLE)) for c in candidates[:cap]]
    rows += [(c, ELIGIBLE) for c in candidates[cap:] if c not in first][:cap]
    chosen = explained.chosen
    if chosen is not None and chosen in candidates[cap:] and all(c != chosen for c, _ in rows):
        rows.append((chosen, first.get(chosen, ELIGIBLE)))
    view.rows = [(c, None if p is None else str(p)) for c, p in rows]

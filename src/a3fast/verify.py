"""The verification procedure of §7: from the trace alone, was each task placed on an agent that
satisfied every requirement, and does the record explain why?

    findings = a3fast.verify(records)          # records: dicts {seq, kind, content}
    findings = verify_file("trace.jsonl")      # JSON Lines streamed in constant memory, or a JSON array
    valid = is_valid(findings)

Every error is reported, never just the first. Each Finding names its code, the record's `seq`,
the line it came from, and in words what was expected and what was found. Bad input of any shape
gives findings, never an exception. Codes are those of §7, plus E_TRACE for a record that breaks
the trace format (docs/design.md, reading 7) and a3fast's own warnings (`W_…`), which never make a trace
invalid.
"""
from __future__ import annotations

import os
from array import array
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterable, Mapping

from .errors import describe, printable
from .predicates import (AGENT_REF, ANTI_AFFINITY, CAPABILITY, CLEARANCE, LATENCY, RESIDENCY, TOOL,
                         UNMET_CODE, parse_predicate, satisfies)
from .rejection_claims import claims_no_eligible_agent, names_a_predicate
from .schema import Declaration, SchemaError, parse_requirements
from .record.compact import KEY as COMPACT_KEY, derived_reason
from .record.compact_read import CompactReader
from .record.read import ABSENT, BOUND_RECORD, ParsedDocuments, RecordedPlacement, read_scheduling, read_typed
from .trace import (TraceContentError, TraceItem, TraceProblem, TraceRecord, read_trace, read_values)

__all__ = ["Finding", "Verifier", "verify", "verify_file", "verify_stream", "verify_stream_counted", "verify_bytes",
           "verify_items", "is_valid", "summarise", "ERROR_CODES", "WARNING_CODES"]

#: Every error code the verifier reports: §7's, and E_TRACE for the trace format.
ERROR_CODES = (
    "E_TRACE", "E_STRUCTURE", "E_DECLARATION_SCOPE", "E_REQUIREMENTS_MISMATCH",
    *UNMET_CODE.values(), "E_EXPLANATION", "E_REJECTION_REASON",
)
#: Running out of memory: never a finding about the trace (which would call a valid trace
#: invalid); the command says it ran out (exit 2).
RESOURCES = (MemoryError,)
#: a3fast's own checks: reported, but they never make a trace invalid.
WARNING_CODES = ("W_FAILED_PREDICATE_UNMATCHED", "W_FAILED_AND_SCORED",
                 "W_ENVELOPE_EXCEEDS_CLEARANCES", "W_ENVELOPE_MALFORMED")

SUBMITTED, ADMITTED, BOUND, REJECTED = "task.submitted", "task.admitted", "task.bound", "task.rejected"


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the verifier found. `severity` is "error" (§7 codes, E_TRACE) or "warning"."""

    code: str
    seq: int | None
    message: str
    line: int | None = None
    severity: str = "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "seq": self.seq, "line": self.line, "message": self.message}

    def __str__(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.seq is not None:
            where.append(f"seq {self.seq}")
        prefix = ", ".join(where) + ": " if where else ""
        label = "" if self.is_error else "warning "
        return f"{prefix}{label}{self.code}: {self.message}"


def is_valid(findings: Iterable[Finding]) -> bool:
    """A trace is valid when the verifier found no error (warnings do not count)."""
    return not any(f.is_error for f in findings)


# ---------------------------------------------------------------------------------------------
# Words for findings

def _agent_text(agent: tuple[str, str] | None) -> str:
    return "no agent" if agent is None else f"{agent[1]}/{agent[0]}"


def _listing(items: Iterable[str], limit: int = 8) -> str:
    items = list(items)
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def unmet_detail(decl: Declaration, predicate: str) -> str:
    """What the declaration has instead of what the predicate asks for (§5)."""
    p = parse_predicate(predicate)
    who = f"agent {decl.agent.name!r}"
    if p is None:
        return f"{predicate!r} is not a predicate of §5"
    if p.kind == CAPABILITY:
        versions = sorted(c.version for c in decl.capabilities if c.name == p.arg)
        if versions:
            return (f"{who} declares {p.arg} at major version {_listing(map(str, versions))}, "
                    f"not {p.version}")
        return f"{who} declares no capability {p.arg}"
    if p.kind == CLEARANCE:
        held = _listing(decl.clearances) or "none"
        return f"{who} does not hold clearance {p.arg} (it holds: {held})"
    if p.kind == TOOL:
        if decl.tools is None:
            return f"{who} declares no tools, so it is not bound to {p.arg!r}"
        return f"{who} is not bound to tool {p.arg!r} (its tools: {_listing(decl.tools) or 'none'})"
    if p.kind == RESIDENCY:
        if decl.residency is None:
            return f"{who} declares no residency, so it does not satisfy {p.arg!r}"
        return f"{who} declares residency {list(decl.residency)}, which does not contain {p.arg!r}"
    if p.kind == LATENCY:
        declared = decl.model.latency_class if decl.model is not None else None
        if declared is None:
            return f"{who} declares no model.latency_class, so it does not equal {p.arg!r}"
        return f"{who} declares model.latency_class {declared!r}, not {p.arg!r}"
    if p.kind == AGENT_REF:
        return f"the task named agent {p.arg!r} directly, but the chosen agent is {decl.agent.name!r}"
    if p.kind == ANTI_AFFINITY:
        return f"the task excludes agent {p.arg!r}, and that is the agent chosen"
    return f"{who} does not satisfy {predicate}"


def _difference(want: Iterable[str], have: Iterable[str]) -> tuple[list[str], list[str]]:
    """(in want but not in have, in have but not in want), each in its list's order."""
    want_set, have_set = set(want), set(have)
    return ([p for p in dict.fromkeys(want) if p not in have_set],
            [p for p in dict.fromkeys(have) if p not in want_set])


# ---------------------------------------------------------------------------------------------
# The verifier

class _Cited:
    """What a resumed placement may rely on from an earlier full placement (§6, §7 Explanation):
    kept small so that memory does not grow with the size of the fleet."""

    __slots__ = ("passed", "agent", "chosen_failed", "chosen_scored")

    def __init__(self, passed: frozenset[str], agent: tuple[str, str] | None,
                 chosen_failed: str | None, chosen_scored: bool):
        self.passed = passed
        self.agent = agent
        self.chosen_failed = chosen_failed  # the predicate the chosen agent was failed on, if listed
        self.chosen_scored = chosen_scored


class _Placements:
    """The task.bound records seen so far, for resumed placements that cite one by seq (§6).

    Kept in 16 bytes a placement, so that verifying a long trace needs no more memory than a short
    one: seqs in an int64 array (a trace's seqs increase, so it is sorted and searched by bisection),
    each with the index of its explanation among the distinct ones (many placements share one), or
    -1 when the placement carried none of its own.
    """

    def __init__(self) -> None:
        self._seqs = array("q")
        self._refs = array("q")
        self._other: dict[int, int] = {}  # seqs beyond int64, or out of order (already E_TRACE)
        self._explanations: list[_Cited] = []
        self._ids: dict[tuple, int] = {}
        self._interned: dict[Any, Any] = {}
        self.any_explained = False

    def add(self, seq: int, explanation: _Cited | None) -> None:
        ref = -1
        if explanation is not None:
            # Keep the first copy of each part, not one per placement.
            explanation.passed = self._interned.setdefault(explanation.passed, explanation.passed)
            explanation.agent = self._interned.setdefault(explanation.agent, explanation.agent)
            key = (explanation.passed, explanation.agent, explanation.chosen_failed,
                   explanation.chosen_scored)
            ref = self._ids.get(key, -1)
            if ref < 0:
                ref = self._ids[key] = len(self._explanations)
                self._explanations.append(explanation)
            self.any_explained = True
        seqs = self._seqs
        if -(2**63) <= seq < 2**63 and (not seqs or seq > seqs[-1]):
            seqs.append(seq)
            self._refs.append(ref)
        else:  # a seq that repeats an earlier one (E_TRACE already) stands for its latest placement
            self._other[seq] = ref

    def get(self, seq: int) -> tuple[bool, _Cited | None]:
        """(whether a task.bound has this seq, its explanation if it carried one)."""
        ref = self._other.get(seq)
        if ref is None:  # a seq beyond int64 is never in the array, and the search does not find it
            i = bisect_left(self._seqs, seq)
            if i < len(self._seqs) and self._seqs[i] == seq:
                ref = self._refs[i]
        if ref is None:
            return False, None
        return True, (self._explanations[ref] if ref >= 0 else None)


_NOT_SEEN: Any = object()


class Verifier:
    """§7 over the records of one trace, fed in order; `finish()` returns every finding.

    State is what §7 needs from earlier records: the latest task.submitted's predicate set S, the
    latest task.admitted's agent (docs/design.md, reading 8), and, for resumed placements, a few facts per
    earlier full placement.
    """

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.records = 0
        self.placements = 0
        self.rejections = 0
        self._submitted: Any = _NOT_SEEN      # S as a tuple; None when unreadable
        self._submitted_seq: int | None = None
        # whether the latest task.submitted's task has had its placement (a task.bound or
        # task.rejected after it): a resumption after that one is no placement of that task
        self._submitted_placed = False
        self._admitted: Any = _NOT_SEEN       # (name, namespace); None when it names no agent
        self._admitted_seq: int | None = None
        self._admitted_envelope: Any = None   # (task.admitted content, line, position) until checked
        self._placements = _Placements()
        # resumed placements citing no seq before any full explanation: (seq, line, where its finding goes)
        self._unanchored: list[tuple[int, int | None, int]] = []
        self._documents = ParsedDocuments()  # the trace's requirements and declarations, parsed once
        self._compact_reader: CompactReader | None = None  # made when a compact record appears
        self._finished = False

    # -- feeding --------------------------------------------------------------------------------

    def feed(self, item: TraceItem) -> None:
        if isinstance(item, TraceProblem):
            message = item.message if item.line is not None else f"{item.where}: {item.message}"
            self._error("E_TRACE", item.seq, item.line, message)
            return
        self.records += 1
        kind = item.kind
        if kind not in (SUBMITTED, ADMITTED, BOUND, REJECTED):
            return
        try:
            if kind == BOUND:
                self._check_bound(item)
            elif kind == SUBMITTED:
                self._submitted_placed = False
                self._read_submitted(item, item.content)
            elif kind == ADMITTED:
                self._read_admitted(item, item.content)
            else:
                self._check_rejected(item, *self._note_compact(item, item.content))
        except TraceContentError as exc:
            self._error("E_TRACE", item.seq, item.line, str(exc))
        if kind == BOUND or kind == REJECTED:
            self._submitted_placed = True

    def feed_all(self, items: Iterable[TraceItem]) -> "Verifier":
        for item in items:
            self.feed(item)
        return self

    def finish(self) -> list[Finding]:
        """Checks that need the whole trace, then every finding in trace order."""
        if not self._finished:
            self._finished = True
            if not self._placements.any_explained:
                # each where its record's findings end (last first, so that the places stay true)
                for seq, line, at in reversed(self._unanchored):
                    self.findings.insert(at, Finding(
                        "E_EXPLANATION", seq, "recorded_in names no seq, so the trace must hold a task.bound "
                        "with a full explanation (§6), and it holds none", line))
        return self.findings

    # -- records --------------------------------------------------------------------------------

    def _error(self, code: str, seq: int | None, line: int | None, message: str) -> None:
        self.findings.append(Finding(code, seq, message, line))

    def _warn(self, code: str, seq: int | None, line: int | None, message: str) -> None:
        self.findings.append(Finding(code, seq, message, line, "warning"))

    def _compact_records(self) -> CompactReader:
        """The reader of a3fast's compact records (one per trace: it keeps the fleet snapshots)."""
        if self._compact_reader is None:
            self._compact_reader = CompactReader(self._documents)
        return self._compact_reader

    def _note_compact(self, record: TraceRecord, content: Any) -> tuple[Any, bool]:
        """Register the fleet snapshot a compact rejection may carry, for the records after it, and
        give back the content §7 reads: its code and reason, which stay beside the compact member
        (so the rejection is checked even when the member cannot be read), or the reason the
        member derives when it left it out (docs/compact-format.md, "Derived reasons"); and whether
        the rejection had no candidates at all."""
        if not (isinstance(content, Mapping) and COMPACT_KEY in content):
            return content, isinstance(content, Mapping) and content.get("candidates") == []
        try:
            member = self._compact_records().note(record.seq, content)
        except RESOURCES:
            raise      # the verifier's own limits: no finding about the trace
        except Exception as exc:  # hostile input: a finding, never a crash
            self._error("E_STRUCTURE", record.seq, record.line,
                        f"{COMPACT_KEY}: the compact record cannot be read: {exc}")
            return content, False
        if member.derived_reason:
            return {**content, "reason": derived_reason(member)}, len(member.candidates) == 0
        return content, len(member.candidates) == 0

    def _read_compact(self, record: TraceRecord) -> RecordedPlacement | None:
        """A compact task.bound read straight from its bitmaps (docs/compact-format.md, "Verifying
        without decoding"); None for a record in spec form."""
        content = record.content
        if not (isinstance(content, Mapping) and COMPACT_KEY in content):
            return None
        try:
            return self._compact_records().read(record.seq, content)
        except RESOURCES:
            raise      # the verifier's own limits: no finding about the trace
        except Exception as exc:  # hostile input: a finding, never a crash
            self._error("E_STRUCTURE", record.seq, record.line,
                        f"{COMPACT_KEY}: the compact record cannot be read: {exc}")
            return RecordedPlacement()

    def _read_submitted(self, record: TraceRecord, content: Mapping[str, Any]) -> None:
        """§7 Requirements: S from task.submitted's requirements (absent means empty)."""
        self._submitted_seq = record.seq
        requirements = content.get("requirements")
        if requirements is None:
            self._submitted = ()
            return
        try:
            self._submitted = parse_requirements(requirements, "requirements").predicates
        except SchemaError as exc:
            self._submitted = None
            for problem in exc.problems:
                self._error("E_STRUCTURE", record.seq, record.line,
                            f"task.submitted {problem}; what the task asked for cannot be read")

    def _read_admitted(self, record: TraceRecord, content: Mapping[str, Any]) -> None:
        self._admitted_seq = record.seq
        # The authority envelope (A3 §8) is checked against the declaration of the placement that
        # follows, once: a3fast's own check, reported as warnings, never as §7 errors.
        # Its warnings belong where this record's findings end: the position is kept, and how many
        # seq-less resumed placements came before it (their findings are placed when the trace ends).
        self._admitted_envelope = ((content, record.line, len(self.findings), len(self._unanchored))
                                   if "authority_envelope" in content else None)
        agent = content.get("agent")
        if (isinstance(agent, Mapping) and isinstance(agent.get("name"), str)
                and isinstance(agent.get("namespace"), str)):
            self._admitted = (agent["name"], agent["namespace"])
        else:
            self._admitted = None

    def _check_rejected(self, record: TraceRecord, content: Mapping[str, Any], no_candidates: bool = False) -> None:
        """§7 Rejection: a rejection that claims no eligible agent names a predicate of §5 — one of
        the task's own, as written (a residency label may hold a space or a comma, which no pattern
        over free text tells from the words around it), or any that reads as one. A task that asks
        for nothing, rejected with no candidates at all (an empty fleet), has none to name
        (docs/design.md, reading 6)."""
        self.rejections += 1
        if not claims_no_eligible_agent(content):
            return
        reason = content.get("reason")
        if names_a_predicate(reason):
            return
        # S of the task this rejection places, when its task.submitted came first and was read
        task = self._submitted if type(self._submitted) is tuple and not self._submitted_placed else None
        if isinstance(reason, str) and task and any(predicate in reason for predicate in task):
            return
        if task == () and no_candidates:
            return
        found = "no reason" if reason is None else f"reason {describe(reason, 120)}"
        self._error("E_REJECTION_REASON", record.seq, record.line,
                    "a rejection that claims no agent was eligible must name at least one failed "
                    f"predicate of §5 (such as capability:<name>/<version>); found {found}")

    def _check_bound(self, record: TraceRecord) -> None:
        self.placements += 1
        placement = None
        if record.typed is not None:
            placement = read_typed(record.typed, self._documents)
        if placement is None:
            placement = self._read_compact(record)
        if placement is None:
            placement = read_scheduling(record.content, self._documents)
        seq, line = record.seq, record.line
        for problem in placement.problems:  # §7 Placement
            self._error("E_STRUCTURE", seq, line, problem)
        agent = placement.agent
        predicates = placement.requirements.predicates if placement.requirements is not None else None
        # a resumption that cites an earlier full placement of a task another task.submitted followed
        # goes back to that placement's task (§6): it is held to what it cites (`_check_cited`: the
        # same agent, the same matched predicates, themselves held to that task's submission and
        # admission), not to the latest task.submitted and task.admitted, another task's
        # (docs/design.md, reading 8)
        if not self._resumes_an_earlier_task(seq, placement):
            self._check_scope(seq, line, agent)
            if predicates is not None:
                self._check_consistency(seq, line, predicates, placement.route)
        self._check_envelope(agent, placement.declaration)
        if predicates is not None:
            if placement.declaration is not None:
                self._check_satisfaction(seq, line, predicates, placement.declaration)
        if placement.recorded_in is ABSENT:
            self._check_explanation(seq, line, placement, predicates)
        else:
            self._check_reference(seq, line, placement, predicates)

    def _resumes_an_earlier_task(self, seq: int, placement: RecordedPlacement) -> bool:
        """Whether `placement` is a resumption whose recorded_in names an earlier task.bound with a
        full explanation (which `_check_reference` holds it to), and a task.submitted came after
        that placement whose task has been placed since: the latest submission and admission are
        then another task's. Without one, they are its own task's (a task admitted again to another
        agent is still that task); while the latest task awaits its placement, this may be it."""
        ref = placement.recorded_in
        if not placement.resumed or not isinstance(ref, Mapping) or ref.get("kind") != BOUND:
            return False
        target = ref.get("seq")
        if type(target) is not int or target >= seq:
            return False
        submitted = self._submitted_seq
        if type(submitted) is not int or submitted <= target or not self._submitted_placed:
            return False
        return self._placements.get(target)[1] is not None

    # -- the steps of §7 ------------------------------------------------------------------------

    def _check_scope(self, seq: int, line: int | None, agent: tuple[str, str] | None) -> None:
        """§7 Scope: the declaration is for the agent in the latest task.admitted (docs/design.md,
        reading 8)."""
        if agent is None:
            return  # no readable declaration: already E_STRUCTURE
        admitted = self._admitted
        if admitted is _NOT_SEEN:
            self._error("E_DECLARATION_SCOPE", seq, line,
                        f"the declaration is for {_agent_text(agent)}, but no task.admitted precedes "
                        "this placement to say which agent the task was admitted to")
        elif admitted is None:
            self._error("E_DECLARATION_SCOPE", seq, line,
                        f"the declaration is for {_agent_text(agent)}, but the latest task.admitted "
                        f"(seq {self._admitted_seq}) names no agent {{name, namespace}}")
        elif admitted != agent:
            self._error("E_DECLARATION_SCOPE", seq, line,
                        f"the declaration is for {_agent_text(agent)}, but the latest task.admitted "
                        f"(seq {self._admitted_seq}) admitted {_agent_text(admitted)}")

    def _check_envelope(self, agent: tuple[str, str] | None, declaration: Declaration | None) -> None:
        """The latest task.admitted's authority_envelope lies within the admitted agent's declared
        clearances (W_ENVELOPE_*; see a3fast.authority.envelope)."""
        if self._admitted_envelope is None or declaration is None or agent != self._admitted:
            return
        content, line, at, unanchored_before = self._admitted_envelope
        self._admitted_envelope = None
        from .authority.envelope import check_envelope

        inserted = 0
        for code, message in check_envelope(content, declaration):
            self.findings.insert(at + inserted, Finding(code, self._admitted_seq, message, line, "warning"))
            inserted += 1
        # the places kept for the seq-less resumed placements read since then move with the findings
        self._unanchored[unanchored_before:] = [(seq, seq_line, place + inserted)
                                                for seq, seq_line, place in self._unanchored[unanchored_before:]]

    def _check_consistency(self, seq: int, line: int | None, matched: tuple[str, ...],
                           route: str | None) -> None:
        """§7 Consistency: S ⊆ P, and P = S when no route is on record."""
        asked = self._submitted
        if asked is None:
            return  # task.submitted unreadable: already E_STRUCTURE there
        if asked is _NOT_SEEN:
            self._error("E_REQUIREMENTS_MISMATCH", seq, line,
                        "no task.submitted precedes this placement, so what was asked cannot be "
                        "compared with what was matched (§6: the requirements MUST also appear there)")
            return
        dropped, added = _difference(asked, matched)
        if dropped:
            self._error("E_REQUIREMENTS_MISMATCH", seq, line,
                        f"the task asked for {_listing(dropped)} (task.submitted, seq "
                        f"{self._submitted_seq}), but scheduling.requirements does not: a placement "
                        "may only add requirements, never drop one")
        if added and route is None:
            self._error("E_REQUIREMENTS_MISMATCH", seq, line,
                        f"scheduling.requirements adds {_listing(added)}, which the task did not ask "
                        f"for (task.submitted, seq {self._submitted_seq}), and no route is on record "
                        "to name the rule that added it")

    def _check_satisfaction(self, seq: int, line: int | None, matched: tuple[str, ...],
                            decl: Declaration) -> None:
        """§7 Satisfaction: every predicate of P is satisfied by the declaration; one error each."""
        for predicate in matched:
            if not satisfies(decl, predicate):
                code = UNMET_CODE[predicate.partition(":")[0]]
                self._error(code, seq, line, f"{predicate} is not satisfied: {unmet_detail(decl, predicate)}")

    def _check_explanation(self, seq: int, line: int | None, placement: RecordedPlacement,
                           matched: tuple[str, ...] | None) -> None:
        """§7 Explanation for a placement that carries its own lists."""
        passed = placement.filters_passed
        if passed is not None and matched is not None:
            missing, extra = _difference(matched, passed)
            if missing:
                self._error("E_EXPLANATION", seq, line,
                            f"filters_passed must equal the predicates matched; it lacks {_listing(missing)}")
            if extra:
                self._error("E_EXPLANATION", seq, line,
                            f"filters_passed must equal the predicates matched; it has {_listing(extra)}, "
                            "which scheduling.requirements does not derive")
        agent = placement.agent
        name = agent[0] if agent is not None else None
        failed, scored = placement.failed, placement.scored
        overlap, unmatched = failed.cross_check(scored, matched) if failed is not None else ([], set())
        chosen_scored = scored is not None and name is not None and name in scored
        chosen_failed = None
        # A scored chosen agent that is also failed is in the overlap (usually empty); one that is
        # not scored is looked for in the list itself.
        if failed is not None and name is not None and (not chosen_scored or name in overlap):
            chosen_failed = placement.failed_predicate_of(name)
        if chosen_failed is not None:
            self._error("E_EXPLANATION", seq, line,
                        f"the chosen agent {name!r} is listed in filters_failed (as failing {chosen_failed}), "
                        "so the record says it was not eligible")
        if scored is not None and name is not None and not chosen_scored:
            self._error("E_EXPLANATION", seq, line,
                        f"scores must contain the chosen agent {name!r}, and it does not "
                        f"(it has {len(scored)} entr{'y' if len(scored) == 1 else 'ies'})")
        # a3fast's own checks of §6's wording: warnings, never errors.
        if unmatched:
            self._warn("W_FAILED_PREDICATE_UNMATCHED", seq, line,
                       f"filters_failed gives {_listing(sorted(unmatched))} as a first failed "
                       "predicate, but that is not among the predicates matched")
        if overlap:
            self._warn("W_FAILED_AND_SCORED", seq, line, "listed both in filters_failed (ineligible) "
                       f"and in scores (eligible): {_listing(sorted(set(overlap)))}")
        explanation = None
        if placement.full_explanation and passed is not None:  # full: filters_passed is there
            explanation = _Cited(frozenset(passed), agent, chosen_failed, chosen_scored)
        self._placements.add(seq, explanation)

    def _check_reference(self, seq: int, line: int | None, placement: RecordedPlacement,
                         matched: tuple[str, ...] | None) -> None:
        """§7 Explanation for a resumed placement that points at an earlier one (§6 recorded_in)."""
        self._placements.add(seq, None)
        if not placement.resumed:
            self._error("E_EXPLANATION", seq, line,
                        "recorded_in stands in for the explanation only in a resumed placement, and "
                        "this task.bound does not carry resumed: true")
        ref = placement.recorded_in
        if not isinstance(ref, Mapping):
            self._error("E_EXPLANATION", seq, line,
                        f"recorded_in: expected {{kind: \"task.bound\", seq}}, found {describe(ref)}")
            return
        if ref.get("kind") != BOUND:
            found = "nothing" if "kind" not in ref else describe(ref.get("kind"))
            self._error("E_EXPLANATION", seq, line,
                        f"recorded_in.kind must be \"task.bound\", found {found}")
            return
        target = ref.get("seq")
        if target is None:  # §6: seq MAY be omitted when the implementation cannot tell which
            if not self._placements.any_explained:
                self._unanchored.append((seq, line, len(self.findings)))
            return
        if not isinstance(target, int) or isinstance(target, bool):
            self._error("E_EXPLANATION", seq, line,
                        f"recorded_in.seq must be the seq of an earlier task.bound, found {describe(target)}")
            return
        is_bound, explanation = self._placements.get(target) if target < seq else (False, None)
        if explanation is None:
            if target >= seq:
                why = "which is not earlier than this record"
            elif is_bound:
                why = "a task.bound that carries no full explanation of its own"
            else:
                why = "which is not a task.bound in this trace"
            self._error("E_EXPLANATION", seq, line,
                        f"recorded_in.seq names seq {target}, {why}; it must name an earlier task.bound "
                        "with a full explanation")
            return
        self._check_cited(seq, line, target, explanation, placement.agent, matched)

    def _check_cited(self, seq: int, line: int | None, target: int, explanation: _Cited,
                     agent: tuple[str, str] | None, matched: tuple[str, ...] | None) -> None:
        """The explanation checks, run with the lists of the record a resumed placement names."""
        if matched is not None and explanation.passed != frozenset(matched):
            missing, extra = _difference(matched, sorted(explanation.passed))
            parts = []
            if missing:
                parts.append(f"lacks {_listing(missing)}")
            if extra:
                parts.append(f"has {_listing(extra)}, which this placement did not match")
            self._error("E_EXPLANATION", seq, line,
                        f"the explanation it cites (seq {target}) does not cover this placement: its "
                        f"filters_passed {' and '.join(parts)}")
        if agent is None:
            return
        if explanation.agent != agent:
            self._error("E_EXPLANATION", seq, line,
                        f"the explanation it cites (seq {target}) chose {_agent_text(explanation.agent)}; "
                        f"it does not explain a placement on {_agent_text(agent)}")
            return
        if explanation.chosen_failed is not None:
            self._error("E_EXPLANATION", seq, line,
                        f"the explanation it cites (seq {target}) lists the chosen agent {agent[0]!r} in "
                        f"filters_failed (as failing {explanation.chosen_failed})")
        if not explanation.chosen_scored:
            self._error("E_EXPLANATION", seq, line,
                        f"the explanation it cites (seq {target}) has no score for the chosen agent {agent[0]!r}")


# ---------------------------------------------------------------------------------------------
# Entry points

def verify_items(items: Iterable[TraceItem]) -> list[Finding]:
    return Verifier().feed_all(items).finish()


def verify(records: Any) -> list[Finding]:
    """Verify a trace given as records (dicts `{seq, kind, content}`), per §7. Never raises on what
    the records contain; a value that is not a sequence of records is one E_TRACE finding."""
    if isinstance(records, (bytes, bytearray, memoryview)):
        return verify_bytes(records)
    if isinstance(records, (str, Mapping)) or not isinstance(records, Iterable):
        return [Finding("E_TRACE", None, f"expected a sequence of records {{seq, kind, content}}, "
                                         f"found {describe(records)}")]
    return verify_items(read_values(records))


#: Placements are ~100 KB lines: a larger buffer reads them in fewer, larger reads.
_READ_BUFFER = 1 << 16
#: task.bound lines are decoded in one typed pass (record.read), the rest generically.
_TYPED = {BOUND: BOUND_RECORD}


def verify_bytes(data: bytes | bytearray | memoryview) -> list[Finding]:
    """Verify a trace given as its text: JSON Lines or a JSON array of records."""
    return verify_items(read_trace(bytes(data), typed=_TYPED))


def verify_stream(stream: BinaryIO, progress: Callable[[int], None] | None = None) -> list[Finding]:
    """Verify a trace read from a binary stream; JSON Lines are read line by line, so memory does not
    grow with the trace. `progress(n)` hears of every n bytes read."""
    return verify_stream_counted(stream, progress)[0]


def verify_stream_counted(stream: BinaryIO,
                          progress: Callable[[int], None] | None = None) -> tuple[list[Finding], int]:
    """`verify_stream`, with the number of records read: 0 when nothing in the input reads as a
    record `{seq, kind, content}` (empty, not JSON at all, or JSON that holds no record), which the
    command line reports as unreadable rather than as a valid trace."""
    verifier = Verifier().feed_all(read_trace(stream, progress, typed=_TYPED))
    return verifier.finish(), verifier.records


def verify_file(path: str | os.PathLike, progress: Callable[[int], None] | None = None) -> list[Finding]:
    """Verify the trace in a file (OSError if it cannot be opened; TypeError for anything but a
    file name: an integer would be opened as a descriptor, and closed, under its caller)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"path: expected a file name (str, bytes or os.PathLike), found {describe(path)}")
    with open(path, "rb", buffering=_READ_BUFFER) as fh:
        return verify_stream(fh, progress)


def summarise(findings: list[Finding], source: str | None = None) -> str:
    """Human-readable verification result: a verdict line, then one line per finding."""
    errors = [f for f in findings if f.is_error]
    warnings = len(findings) - len(errors)
    name = f"{source}: " if source else ""
    if errors:
        head = f"{name}invalid: {len(errors)} error{'s' if len(errors) != 1 else ''}"
    else:
        head = f"{name}valid: every check of §7 passed"
    if warnings:
        head += f", {warnings} warning{'s' if warnings != 1 else ''}"
    # a finding quotes the trace, which may hold control characters that would redraw a terminal
    # (erase the verdict, write another): the lines are shown with those characters escaped
    return "\n".join([printable(head), *(printable(f"  {f}") for f in findings)])


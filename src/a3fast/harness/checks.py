"""What the matching suite checks of one placement a matcher made, from its trace records alone.

The expectation is the literal reading of §5 over the fleet that was live at the time: every live
agent is a candidate; each ineligible candidate is listed with the first predicate it failed, in
derivation order (docs/design.md, reading 1); `filters_passed` is the whole predicate set. Of the choice only
what the spec fixes is checked: `scores` holds a finite `total` for every eligible candidate and no
other, and the chosen agent is eligible and best by those totals (higher is better), ties going to
the smaller name. Scoring itself is the
implementation's. No candidate and no failure is listed twice, and a rejection's reason names at
least one failed predicate and the candidates that failed it (§6). Finally the records must pass
the §7 verifier.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

from ..predicates import first_failed
from ..schema import parse_declaration, parse_requirements
from ..verify import verify_bytes

__all__ = ["Expected", "expected_placement", "check_placement", "CHECKS"]

#: The checks, in the order they are reported.
CHECKS = ("records", "candidates", "filters_passed", "filters_failed", "eligible", "reason", "verifier", "choice")


@dataclass(frozen=True)
class Expected:
    predicates: frozenset[str]
    failed: frozenset[tuple[str, str]]      # (candidate, first failed predicate)
    eligible: frozenset[str]


def expected_placement(live: dict[str, dict[str, Any]], requirements: dict[str, Any]) -> Expected:
    """The §5 answer over the live declarations, one candidate at a time."""
    predicates = parse_requirements(requirements).predicates
    failed, eligible = set(), set()
    for name, doc in live.items():
        predicate = first_failed(parse_declaration(doc), predicates)
        if predicate is None:
            eligible.add(name)
        else:
            failed.add((name, predicate))
    return Expected(frozenset(predicates), frozenset(failed), frozenset(eligible))


def from_vector(result) -> Expected:
    """A matching vector's expected result (a3fast.conformance.MatchResult) as an Expected."""
    return Expected(result.filters_passed, result.filters_failed, result.eligible)


def check_placement(records: Any, live: set[str], expected: Expected) -> list[tuple[str, str]]:
    """The differences, as (check, what) pairs in CHECKS order; empty when the placement is right."""
    found = _decision(records)
    if isinstance(found, str):
        return [("records", found)]
    kind, content = found
    body = content.get("scheduling") if kind == "task.bound" else content
    if not isinstance(body, dict):
        return [("records", "task.bound carries no scheduling object")]
    out: list[tuple[str, str]] = []
    candidates = body.get("candidates")
    if not isinstance(candidates, list) or not all(isinstance(c, str) for c in candidates):
        return [("records", "candidates is not a list of agent names")]
    if set(candidates) != live:
        out.append(("candidates", _diff(live, set(candidates))))
    elif len(candidates) != len(live):
        out.append(("candidates", f"{_listing(_repeated(candidates))} listed more than once"))
    if kind == "task.bound":
        passed = body.get("filters_passed")
        if not isinstance(passed, list):
            out.append(("filters_passed", "task.bound has no filters_passed list"))
        elif set(passed) != expected.predicates:
            out.append(("filters_passed", _diff(expected.predicates, set(passed))))
    failed = body.get("filters_failed")
    if not isinstance(failed, list) or not all(isinstance(f, dict) for f in failed):
        return out + [("records", "filters_failed is not a list of {candidate, predicate}")]
    pairs = {(f.get("candidate"), f.get("predicate")) for f in failed}
    if pairs != expected.failed:
        out.append(("filters_failed", _diff(expected.failed, pairs)))
    elif len(failed) != len(pairs):
        listed = [f"{f.get('candidate')!r} failing {f.get('predicate')!r}" for f in failed]
        out.append(("filters_failed", f"{', '.join(sorted(set(_repeated(listed))))} listed more than once"))
    chosen = _chosen(body) if kind == "task.bound" else None
    eligible = set(candidates) - {c for c, _ in pairs}
    if kind == "task.rejected" and expected.eligible:
        out.append(("eligible", f"rejected, but {_listing(expected.eligible)} "
                                f"{'is' if len(expected.eligible) == 1 else 'are'} eligible"))
    elif kind == "task.bound" and not expected.eligible:
        out.append(("eligible", f"bound {chosen!r}, but no agent is eligible"))
    elif eligible != expected.eligible:
        out.append(("eligible", _diff(expected.eligible, eligible)))
    if kind == "task.rejected" and expected.failed:
        problem = _check_reason(content.get("reason"), expected.failed)
        if problem:
            out.append(("reason", problem))
    findings = [f for f in verify_bytes(b"\n".join(orjson.dumps(r) for r in records)) if f.is_error]
    if findings:
        out.append(("verifier", "; ".join(f"{f.code} at seq {f.seq}: {f.message}" for f in findings[:3])))
    if kind == "task.bound":
        problem = _check_choice(chosen, body.get("scores"), expected.eligible)
        if problem:
            out.append(("choice", problem))
    return out


def _decision(records: Any) -> tuple[str, dict[str, Any]] | str:
    """The task.bound or task.rejected record of one placement's records, or what is wrong."""
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        return "the answer's records are not a list of objects"
    decisions = [r for r in records if r.get("kind") in ("task.bound", "task.rejected")]
    if len(decisions) != 1:
        return f"expected one task.bound or task.rejected record, found {len(decisions)}"
    if not isinstance(decisions[0].get("content"), dict):
        return f"{decisions[0].get('kind')} has no content object"
    return decisions[0]["kind"], decisions[0]["content"]


def _names(text: str, name: str) -> bool:
    """Whether `name` is written in `text` as a word of its own: no letter, digit, '.', '-' or '_'
    just before it (a namespace's "ns/" or a "P:" may be), and after it none, or punctuation that
    does not go on into a longer name ("failed by a, b.", "a:P", "a/P")."""
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.[\w-])", text) is not None


def _repeated(items: list[Any]) -> list[Any]:
    """Each item of `items` that an earlier one equals."""
    seen: set[Any] = set()
    repeated = []
    for item in items:
        if item in seen:
            repeated.append(item)
        seen.add(item)
    return repeated


def _check_reason(reason: Any, failed: frozenset[tuple[str, str]]) -> str | None:
    """§6: "a task.rejected whose reason names at least one failed predicate and the candidates that
    failed it": some predicate a candidate failed first appears in the reason with every candidate
    that failed it first, each as a word of its own (not inside a longer name)."""
    if not isinstance(reason, str):
        return "task.rejected has no reason text naming a failed predicate and its candidates (§6)"
    by_predicate: dict[str, list[str]] = {}
    for candidate, predicate in sorted(failed):
        by_predicate.setdefault(predicate, []).append(candidate)
    if any(_names(reason, predicate) and all(_names(reason, name) for name in names)
           for predicate, names in by_predicate.items()):
        return None
    return (f"the reason names no failed predicate with the candidates that failed it (§6), "
            f"such as {next(iter(by_predicate))!r} with {_listing(by_predicate[next(iter(by_predicate))])}")


def _chosen(scheduling: dict[str, Any]) -> str | None:
    decl = scheduling.get("declaration")
    agent = decl.get("agent") if isinstance(decl, dict) else None
    name = agent.get("name") if isinstance(agent, dict) else None
    return name if isinstance(name, str) else None


def _check_choice(chosen: str | None, scores: Any, eligible: frozenset[str]) -> str | None:
    if chosen is None:
        return "the scheduling's declaration names no agent"
    if chosen not in eligible:
        return f"chose {chosen!r}, which is not eligible"
    if not isinstance(scores, dict):
        return "task.bound has no scores object"
    # The best is judged only among what the matcher recorded: scores that leave out an eligible
    # candidate (or hold no comparable total for one) would let any choice pass as the best.
    if set(scores) != eligible:
        return f"scores must hold every eligible candidate and no other (§6): {_diff(eligible, set(scores))}"
    totals: dict[str, float] = {}
    for name, entry in scores.items():
        total = entry.get("total") if isinstance(entry, dict) else None
        if isinstance(total, (int, float)) and not isinstance(total, bool) and math.isfinite(total):
            totals[name] = float(total)
    unscored = eligible - set(totals)
    if unscored:
        return f"scores hold no finite total for {_listing(unscored)}"
    best = min(totals, key=lambda name: (-totals[name], name))
    if best != chosen:
        return (f"chose {chosen!r} (total {totals[chosen]:g}), but {best!r} scores "
                f"{totals[best]:g}{' and has the smaller name' if totals[best] == totals[chosen] else ''}")
    return None


def _diff(want: set | frozenset, have: set | frozenset) -> str:
    missing, extra = sorted(want - have, key=str), sorted(have - want, key=str)
    parts = []
    if missing:
        parts.append(f"missing {_listing(missing)}")
    if extra:
        parts.append(f"unexpected {_listing(extra)}")
    return ", ".join(parts)


def _listing(items, limit: int = 4) -> str:
    items = sorted(items, key=str)
    shown = ", ".join(_show(i) for i in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _show(item) -> str:
    if isinstance(item, tuple):
        return f"{item[0]} failing {item[1]}"
    return str(item)

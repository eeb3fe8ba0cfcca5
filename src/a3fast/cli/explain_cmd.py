"""`a3fast explain`: the placements of a trace in words, counts, and (with a fleet) every failure.

`--json` prints one object per placement per line; docs/explain.md describes its fields (a test
holds the two to each other).

A placement record explain cannot read (lists of the wrong shape, a compact member outside the
format) is named with its seq and member, exit 2, and nothing is printed: the verdicts of a trace
come out whole or not at all.
"""
from __future__ import annotations

import json
from typing import Any

import click
import orjson

from ..errors import A3Error, SchemaError, printable
from ..explain import Explained, ExplainError, all_failed, counts_table, explain_record
from .common import BadInput, EXIT_OK, json_option
from .fleet_input import load_fleet
from .trace_input import read_records


@click.command()
@click.argument("trace", default="-")
@click.option("--seq", type=int, default=None, help="Explain the placement recorded at this seq in detail.")
@click.option("--all-failed", "all_failed_flag", is_flag=True,
              help="Every predicate each ineligible candidate fails, not only the first (needs --fleet).")
@click.option("--fleet", "fleet_path", default=None, metavar="FLEET",
              help="The fleet the trace was placed on, read with --all-failed (a trace carries only the "
                   "chosen declaration).")
@json_option("One JSON object per placement per line, for machines (its fields: docs/explain.md).")
def explain(trace, seq, all_failed_flag, fleet_path, as_json):
    """Explain placements: a verdict line per placement, or one in detail with --seq."""
    if all_failed_flag and fleet_path is None:
        raise BadInput("--all-failed needs --fleet: a trace carries only the chosen agent's declaration")
    if fleet_path is not None and not all_failed_flag:
        # read only for --all-failed: taken silently, it would seem to have been used
        raise BadInput("--fleet is read only with --all-failed (every predicate each candidate fails); "
                       "without it the trace alone is explained")
    if all_failed_flag and seq is None:
        raise BadInput("--all-failed needs --seq: it explains one placement in detail")
    if all_failed_flag and trace == "-" and fleet_path == "-":
        raise BadInput("standard input is read once: give the trace or the fleet (--fleet) as a file")
    found = False
    lines: list[str] = []
    problems: list[str] = []
    for record_seq, kind, content in read_records(trace, decode=True):
        if seq is not None and record_seq != seq:
            continue
        try:
            explained = explain_record(record_seq, kind, content)
        except ExplainError as exc:
            problems.append(f"{trace}: {exc}")
            continue
        if explained is None:
            if seq is not None:
                raise BadInput(f"{trace}: seq {seq} is a {kind} record, not a placement with an explanation")
            continue
        found = True
        failures = (_all_failed(trace, fleet_path, record_seq, kind, content)
                    if all_failed_flag else None)
        if as_json:
            lines.append(_dumps(_json(explained, seq is not None, failures)))
        else:
            # names quoted from a trace are shown escaped: a control character must not redraw the terminal
            lines += map(printable, _text(explained, seq is not None, failures))
    if problems:
        raise BadInput(problems)
    if not found:
        raise BadInput(f"{trace}: no placement with an explanation" + (f" at seq {seq}" if seq is not None else ""))
    for line in lines:
        click.echo(line)
    return EXIT_OK


def _all_failed(trace: str, fleet_path: str, seq: int, kind: str, content: Any) -> dict[str, list[str]]:
    """Every failure of each ineligible candidate of the placement, for the record's requirements:
    the fleet's agents the placement considered (a Kubernetes filter's were the nodes offered),
    each of which the fleet must hold."""
    holder, where = (content["scheduling"], "$.content.scheduling.requirements") if kind == "task.bound" \
        else (content, "$.content.requirements")
    if "requirements" not in holder:
        raise BadInput(f"{trace}: seq {seq}: {where}: expected the task's requirements, found none")
    # a fleet of no agents would say that no candidate fails anything
    fleet = load_fleet(fleet_path, None, allow_empty=False)
    try:
        failed = all_failed(fleet, holder["requirements"])
    except SchemaError as exc:
        raise BadInput(exc.with_source(f"{trace}: seq {seq}", path_prefix=where).lines()) from None
    except A3Error as exc:
        raise BadInput(f"{trace}: seq {seq}: {where}: {exc}") from None
    candidates = list(dict.fromkeys(holder.get("candidates", ())))
    missing = [name for name in candidates if name not in fleet]
    if missing:
        shown = ", ".join(printable(repr(name)) for name in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise BadInput(f"{fleet_path}: holds no agent {shown}, {len(missing)} of the {len(candidates)} candidates "
                       f"of seq {seq}: give the fleet the trace was placed on")
    considered = set(candidates)
    return {name: predicates for name, predicates in failed.items() if name in considered}


def _ranked(explained: Explained) -> list[tuple[str, Any]]:
    return sorted(explained.scores.items(), key=lambda kv: (-_total(kv[1]), kv[0]))


def _text(explained: Explained, detail: bool, failures: dict[str, list[str]] | None) -> list[str]:
    lines = [f"seq {explained.seq} {explained.kind}: {explained.summary()}"]
    if not detail:
        return lines
    lines += counts_table(explained.counts())
    for name, entry in _ranked(explained)[:5]:
        parts = ", ".join(f"{k} {v}" for k, v in entry.items()) if isinstance(entry, dict) else str(entry)
        lines.append(f"  score {name}: {parts}")
    if explained.reason:
        lines.append(f"  reason: {explained.reason}")
    lines += [f"  {name} fails {', '.join(predicates)}" for name, predicates in (failures or {}).items()]
    return lines


def _json(explained: Explained, detail: bool, failures: dict[str, list[str]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seq": explained.seq, "kind": explained.kind, "summary": explained.summary(),
        "candidates": explained.candidates, "eligible": explained.eligible, "chosen": explained.chosen,
        "predicates": [{"predicate": c.predicate, "reached": c.reached, "removed": c.removed}
                       for c in explained.counts()],
        "reason": explained.reason,
    }
    if detail:
        out["scores"] = dict(_ranked(explained))
    if failures is not None:
        out["all_failed"] = failures
    return out


def _dumps(obj: Any) -> str:
    """JSON text of what a trace held; the standard library writes the values orjson refuses (an
    integer beyond 64 bits, a lone surrogate) as JSON allows them."""
    try:
        return orjson.dumps(obj).decode()
    except TypeError:
        return json.dumps(obj)


def _total(entry: Any) -> float | int:
    """The entry's total for ranking (compared as it is: a JSON integer may be too large for a float)."""
    total = entry.get("total") if isinstance(entry, dict) else None
    return total if isinstance(total, (int, float)) and not isinstance(total, bool) else float("-inf")

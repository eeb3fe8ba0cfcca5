"""`a3fast explain`: the placements of a trace in words, counts, and (with a fleet) every failure.

`--json` prints one object per placement per line:
`{"seq", "kind", "summary", "candidates", "eligible", "chosen", "predicates": [{"predicate",
"reached", "removed"}], "reason"}`; with `--seq` also `"scores"` (every eligible agent's entry) and,
with `--all-failed`, `"all_failed"`: {candidate: [every predicate it fails]}.
"""
from __future__ import annotations

import json
from typing import Any

import click
import orjson

from ..errors import SchemaError
from ..explain import Explained, all_failed, counts_table, explain_record
from .common import BadInput, EXIT_OK, json_option
from .fleet_input import load_fleet
from .trace_input import read_records


@click.command()
@click.argument("trace", default="-")
@click.option("--seq", type=int, default=None, help="Explain the placement recorded at this seq in detail.")
@click.option("--all-failed", "all_failed_flag", is_flag=True,
              help="Every predicate each ineligible candidate fails, not only the first (needs --fleet).")
@click.option("--fleet", "fleet_path", default=None, metavar="FLEET",
              help="The fleet the trace was placed on (a trace carries only the chosen declaration).")
@json_option("One JSON object per placement per line, for machines (shape: `a3fast.cli.explain_cmd`).")
def explain(trace, seq, all_failed_flag, fleet_path, as_json):
    """Explain placements: a verdict line per placement, or one in detail with --seq."""
    if all_failed_flag and fleet_path is None:
        raise BadInput("--all-failed needs --fleet: a trace carries only the chosen agent's declaration")
    if all_failed_flag and seq is None:
        raise BadInput("--all-failed needs --seq: it explains one placement in detail")
    fleet = load_fleet(fleet_path, None) if all_failed_flag else None
    found = False
    for record_seq, kind, content in read_records(trace, decode=True):
        if seq is not None and record_seq != seq:
            continue
        explained = explain_record(record_seq, kind, content)
        if explained is None:
            if seq is not None:
                raise BadInput(f"{trace}: seq {seq} is a {kind} record, not a placement with an explanation")
            continue
        found = True
        failures = _all_failed(fleet, trace, record_seq, kind, content) if fleet is not None else None
        if as_json:
            click.echo(_dumps(_json(explained, seq is not None, failures)))
        else:
            _print(explained, seq is not None, failures)
    if not found:
        raise BadInput(f"{trace}: no placement with an explanation" + (f" at seq {seq}" if seq is not None else ""))
    return EXIT_OK


def _all_failed(fleet, trace: str, seq: int, kind: str, content: Any) -> dict[str, list[str]]:
    scheduling = content.get("scheduling") if kind == "task.bound" else None
    requirements = (scheduling if isinstance(scheduling, dict) else content).get("requirements")
    try:
        return all_failed(fleet, requirements or {})
    except SchemaError as exc:
        raise BadInput([f"{trace}: seq {seq}: requirements: {p}" for p in exc.problems]) from None


def _ranked(explained: Explained) -> list[tuple[str, Any]]:
    return sorted(explained.scores.items(), key=lambda kv: (-_total(kv[1]), kv[0]))


def _print(explained: Explained, detail: bool, failures: dict[str, list[str]] | None) -> None:
    click.echo(f"seq {explained.seq} {explained.kind}: {explained.summary()}")
    if not detail:
        return
    for line in counts_table(explained.counts()):
        click.echo(line)
    for name, entry in _ranked(explained)[:5]:
        parts = ", ".join(f"{k} {v}" for k, v in entry.items()) if isinstance(entry, dict) else str(entry)
        click.echo(f"  score {name}: {parts}")
    if explained.reason:
        click.echo(f"  reason: {explained.reason}")
    for name, predicates in (failures or {}).items():
        click.echo(f"  {name} fails {', '.join(predicates)}")


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


def _total(entry) -> float:
    total = entry.get("total") if isinstance(entry, dict) else None
    return float(total) if isinstance(total, (int, float)) and not isinstance(total, bool) else float("-inf")

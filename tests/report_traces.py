"""Traces the report tests read: placements on a generated fleet (kept, so a test can compare the
page with the live Placement), a trace with §7 findings from the vectors, and hostile names; and the
replay page of a trace on a new fleet."""
from __future__ import annotations

import json
from pathlib import Path

import a3fast
from a3fast.record.write import placement_records
from a3fast.trace import TraceWriter
from a3fast.workload import generate_fleet, generate_tasks

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
HOSTILE = "<script>alert(1)</script>"


def placed_trace(path: Path, agents: int = 300, tasks: int = 30, seed: int = 0, engine: str | None = None):
    """Write the trace of `tasks` placements; returns [(seq of the placement record, Placement)]."""
    declarations = generate_fleet(agents, seed)
    fleet = a3fast.Fleet(engine=engine)
    fleet.extend(declarations)
    placements = [fleet.place(t) for t in generate_tasks(declarations, tasks, seed)]
    return placements_trace(path, placements)


def placements_trace(path: Path, placements) -> list:
    out = []
    with open(path, "wb") as fh:
        writer = TraceWriter(fh)
        for p in placements:
            for kind, content in placement_records(p):
                seq = writer.append(kind, content_json=content)
                if kind in ("task.bound", "task.rejected"):
                    out.append((seq, p))
    return out


def hostile_placements(engine: str | None = None):
    """A fleet where one agent's name is markup, and placements that name it as chosen and rejected."""
    fleet = a3fast.Fleet(engine=engine)
    fleet.add({"v": "1.0", "agent": {"name": HOSTILE, "namespace": "x"},
               "capabilities": [{"name": "order.review", "version": 1}], "clearances": ["orders.read"]})
    for i in range(3):
        fleet.add({"v": "1.0", "agent": {"name": f"plain-{i}", "namespace": "x"},
                   "capabilities": [{"name": "order.review", "version": 1}], "clearances": []})
    bound = fleet.place({"v": "1.0", "capabilities": [{"name": "order.review", "version": 1}],
                         "clearances": ["orders.read"]})
    rejected = fleet.place({"v": "1.0", "capabilities": [{"name": "order.review", "version": 1}],
                            "clearances": ["orders.admin"]})
    return fleet, [bound, rejected]


def findings_trace(path: Path) -> dict:
    """The vector case whose one task.bound breaks scope, satisfaction and explanation, preceded by a
    valid placement; returns the case's expectation."""
    cases = json.loads((VECTORS / "capability-schema" / "several-errors.json").read_text())
    case = next(c for c in cases if c["description"] == "one record breaking scope, satisfaction and explanation")
    valid = next(c for c in cases if c["expected"]["valid"])
    records = [dict(r) for r in valid["trace"]]
    offset = records[-1]["seq"]
    records += [{**r, "seq": r["seq"] + offset} for r in case["trace"]]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return {"errors": [{**e, "seq": e["seq"] + offset} for e in case["expected"]["errors"]]}


def page_of(trace: Path, fleet, out: Path, **kwargs) -> tuple[list, Path]:
    """The replay of `trace` on `fleet` written as its page to `out`: (the verdicts, `out`)."""
    from a3fast.replay import replay, summarise
    from a3fast.report.replay_page import render_replay

    verdicts = list(replay(trace, fleet))
    changed = [v for v in verdicts if v.changed]
    out.write_text(render_replay(summarise(verdicts), changed, trace=trace.name, fleet="new fleet", **kwargs))
    return verdicts, out


def renumbered(path: Path, first: int) -> list[int]:
    """The trace at `path` with its seqs made `first`, `first + 1`, …; returns the placements' seqs."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for i, record in enumerate(records):
        record["seq"] = first + i
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return [r["seq"] for r in records if r["kind"] in ("task.bound", "task.rejected")]

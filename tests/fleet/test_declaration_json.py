"""A placement encodes its agent's declaration as JSON the first time something asks for it (a record
writer, a caller), not when the task is placed; the agent table keeps that JSON from then on while
the agent is declared by the same object (docs/design.md, "A Placement's declaration JSON"); on
both engines."""
from __future__ import annotations

import json

import orjson

from a3fast.fleet import Fleet
from a3fast.record.compact import Encoder
from a3fast.record.write import placement_records

from factories import declaration, fleet_of, requirements

TASKS = [requirements(clearances=["orders.read"]), requirements(residency="us"),
         requirements(clearances=["orders.read"], residency="eu"), requirements(clearances=["nobody.has"])]


def agents() -> list[dict]:
    return [declaration("a", clearances=["orders.read"], residency=["eu"]),
            declaration("b", clearances=["orders.read"], residency=["us"])]


def without_clocks(lines: bytes) -> list[dict]:
    """Compact trace lines as records, their timings left out."""
    records = [orjson.loads(line) for line in lines.splitlines()]
    for record in records:
        content = record["content"]
        if record["kind"] == "task.bound":
            del content["a3fast.compact"]["rest"]["timings"]
        elif record["kind"] == "task.rejected":
            del content["timings"]
    return records


def test_a_placement_nobody_records_encodes_no_declaration(engine):
    fleet = fleet_of(engine, agents())
    table = fleet._table
    placed = [fleet.place(task) for task in TASKS]
    assert [p.agent for p in placed] == ["a", "b", "a", None]
    assert table.decl_json == [None, None]
    assert [p._declaration_json for p in placed] == [None] * 4


def test_the_first_ask_encodes_it_once_and_the_table_keeps_it(engine):
    fleet = fleet_of(engine, agents())
    table = fleet._table
    first = fleet.place(TASKS[0])
    assert first._fleet is fleet
    text = first.declaration_json
    assert text == orjson.dumps(first.declaration.doc) == orjson.dumps(agents()[0])
    assert first.declaration_json is text and table.decl_json[table.ids["a"]] is text
    # made, the JSON is the placement's own: a placement kept by its caller keeps no fleet
    assert first._fleet is None
    # a later win of the same agent carries the kept JSON from its build on, and no fleet
    again = fleet.place(TASKS[2])
    assert again._declaration_json is text and again.declaration_json is text and again._fleet is None
    assert fleet.place(TASKS[3]).declaration_json is None     # unschedulable: no agent, no JSON


def test_place_many_encodes_none_and_its_records_are_those_of_placements_asked_first(engine):
    lazy_fleet, eager_fleet = fleet_of(engine, agents()), fleet_of(engine, agents())
    lazy = lazy_fleet.place_many(TASKS, remember_session=False)
    eager = eager_fleet.place_many(TASKS, remember_session=False)
    assert lazy_fleet._table.decl_json == [None, None]
    for p in eager:
        p.declaration_json
    lines, counts = Encoder().encode_placements_lines(1, lazy)
    eager_lines, eager_counts = Encoder().encode_placements_lines(1, eager)
    assert counts == eager_counts == [3, 3, 3, 2]
    # the same records but for the clocks each placement read
    assert without_clocks(lines) == without_clocks(eager_lines)
    assert [r["content"]["a3fast.compact"]["declaration"] for r in without_clocks(lines)
            if r["kind"] == "task.bound"] == [agents()[i] for i in (0, 1, 0)]
    # writing them made the table keep each chosen agent's JSON, as asking does
    assert lazy_fleet._table.decl_json == [orjson.dumps(d) for d in agents()]
    assert [p._declaration_json for p in lazy] == [orjson.dumps(agents()[i]) for i in (0, 1, 0)] + [None]
    spec = [dict(placement_records(p)) for p in lazy[:3]]
    assert [orjson.loads(s["task.bound"])["scheduling"]["declaration"] for s in spec] == \
        [agents()[i] for i in (0, 1, 0)]


def test_an_agent_declared_again_since_keeps_the_placement_s_declaration(engine):
    fleet = fleet_of(engine, agents())
    placed = fleet.place(TASKS[0])
    chosen = placed.declaration
    changed = declaration("a", clearances=["orders.read", "orders.write"], residency=["eu"])
    fleet.add(changed)
    aid = fleet._table.ids["a"]
    # the placement's record carries the declaration it chose; the table's entry is the new one's
    assert placed.declaration_json == orjson.dumps(chosen.doc) == orjson.dumps(agents()[0])
    assert fleet._table.decl_json[aid] is None
    assert fleet.declaration_json(aid) == orjson.dumps(changed)
    assert fleet.place(TASKS[0]).declaration_json == orjson.dumps(changed)


def test_an_agent_removed_since_still_has_its_placement_recorded(engine):
    fleet = fleet_of(engine, agents())
    placed = fleet.place(TASKS[1])
    fleet.remove("b")
    assert placed.declaration_json == orjson.dumps(agents()[1])
    lines, count = Encoder().encode_placement_lines(1, placed)
    assert count == 3
    assert orjson.loads(lines.splitlines()[2])["kind"] == "task.bound"


def test_a_fleet_read_from_stored_text_places_with_that_text(engine, tmp_path):
    path = tmp_path / "fleet.jsonl"
    path.write_text("".join(json.dumps(d, separators=(",", ":")) + "\n" for d in agents()))
    fleet = Fleet(engine)
    fleet.extend_jsonl(path)
    placed = fleet.place(TASKS[1])
    # reading the chosen declaration kept its stored text: nothing is encoded again
    assert placed._declaration_json == orjson.dumps(agents()[1])
    assert placed._declaration_json is fleet._table.decl_json[fleet._table.ids["b"]]


def test_the_first_ask_keeps_the_json_under_the_fleet_s_lock(engine):
    """The JSON is kept where an update of the agent clears it, so it is kept under the lock
    updates take: an ask never keeps a declaration's JSON for the agent's next one."""
    fleet = fleet_of(engine, agents())
    placed = fleet.place(TASKS[0])
    lock, held = fleet._lock, []

    class Watched:
        def __enter__(self):
            lock.acquire()
            held.append(fleet._table.decl_json[fleet._table.ids["a"]])

        def __exit__(self, *exc):
            lock.release()

    fleet._lock = Watched()
    text = placed.declaration_json
    assert held == [None] and fleet._table.decl_json[fleet._table.ids["a"]] is text

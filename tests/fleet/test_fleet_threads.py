"""A Fleet shared between threads, as an embedding scheduler shares it: reads that write the agent
table (a loaded declaration parsed when first read) and reads of several parts of the index take
the fleet's lock, and a caller's scorer that changes the fleet is refused (docs/design.md, "A
caller's objects run code inside a placing call")."""
from __future__ import annotations

import threading

import orjson
import pytest

import a3fast
from a3fast.fleet import table as table_module


def decl(name: str, clearance: str = "x.c") -> dict:
    return {"v": "1.0", "agent": {"name": name, "namespace": "ns"},
            "capabilities": [{"name": "x.a", "version": 1}], "clearances": [clearance]}


REQ = {"v": "1.0", "capabilities": [{"name": "x.a", "version": 1}], "clearances": ["x.c"]}


def loaded(engine: str, tmp_path, source: str) -> a3fast.Fleet:
    built = a3fast.Fleet(engine=engine)
    built.extend([decl(f"ag{i}") for i in range(20)])
    if source == "snapshot":
        built.save(tmp_path / "fleet.a3snap")
        return a3fast.Fleet.load(tmp_path / "fleet.a3snap", engine=engine)
    (tmp_path / "fleet.jsonl").write_bytes(b"".join(orjson.dumps(decl(f"ag{i}")) + b"\n" for i in range(20)))
    return a3fast.Fleet.load_jsonl(tmp_path / "fleet.jsonl", engine=engine)


@pytest.mark.parametrize("source", ["snapshot", "jsonl"])
@pytest.mark.parametrize("change", ["remove", "replace"])
@pytest.mark.parametrize("read", ["get", "namespace_of", "iterate"])
def test_a_read_that_parses_a_loaded_declaration_never_undoes_a_change_made_meanwhile(
        engine, tmp_path, monkeypatch, source, change, read):
    fleet = loaded(engine, tmp_path, source)
    parse = table_module.parse_declaration
    changer: list[threading.Thread] = []

    def parse_while_another_thread_changes_the_agent(doc):
        if not changer and doc["agent"]["name"] == "ag3":
            thread = threading.Thread(target=(lambda: fleet.remove("ag3")) if change == "remove"
                                      else (lambda: fleet.add(decl("ag3", "x.other"))))
            changer.append(thread)
            thread.start()
            thread.join(0.5)     # it waits for the fleet's lock, or (unlocked) changes the agent now
        return parse(doc)

    monkeypatch.setattr(table_module, "parse_declaration", parse_while_another_thread_changes_the_agent)
    if read == "get":
        fleet.get("ag3")
    elif read == "namespace_of":
        fleet.namespace_of("ag3")
    else:
        list(fleet)
    changer[0].join()
    monkeypatch.setattr(table_module, "parse_declaration", parse)
    if change == "remove":
        assert "ag3" not in fleet and fleet.get("ag3") is None and len(fleet) == 19 == len(fleet.names())
    else:
        assert fleet.get("ag3").doc["clearances"] == ["x.other"]
        assert fleet.place(REQ, candidates=["ag3"]).agent is None      # matched on what it declares now
    fleet.save(tmp_path / "again.a3snap")
    assert a3fast.Fleet.load(tmp_path / "again.a3snap", engine=engine).names() == fleet.names()


def test_all_failed_reads_one_fleet_while_another_thread_changes_it(engine, monkeypatch):
    fleet = a3fast.Fleet(engine=engine)
    fleet.extend([decl(f"ag{i}") for i in range(20)])
    index = fleet._index
    live_ids = index.live_ids
    changer: list[threading.Thread] = []

    class Watched:
        """The index, whose live set is read first: another thread removes an agent and adds it
        back (as a new id) while all_failed goes on to the predicates' rows."""
        def __getattr__(self, name):
            return getattr(index, name)

        def live_ids(self):
            ids = live_ids()
            if not changer:
                thread = threading.Thread(target=lambda: (fleet.remove("ag3"), fleet.add(decl("ag3"))))
                changer.append(thread)
                thread.start()
                thread.join(0.5)
            return ids

    monkeypatch.setattr(fleet, "_index", Watched())
    assert fleet.all_failed(REQ) == {}       # every agent, before and after, satisfies the task
    changer[0].join()


@pytest.mark.parametrize("how", ["place", "place_many"])
def test_a_scorer_that_changes_the_fleet_is_refused_and_nothing_is_placed(engine, how):
    fleet = a3fast.Fleet(engine=engine)
    fleet.extend([decl(f"ag{i}") for i in range(3)])

    def scorer(task, agents):
        for i in range(3):
            fleet.add(decl(f"ag{i}", "x.other"))     # every agent declared again, without x.c
        return [{"total": 1.0} for _ in agents]

    with pytest.raises(RuntimeError, match="the fleet changed while a caller's scorer scored a placement"):
        if how == "place":
            fleet.place(REQ, scorer=scorer, session="s")
        else:
            fleet.place_many([REQ, REQ], sessions=["s", "t"], scorer=scorer)
    # the scorer's own change stays, and no session was held
    assert all(d.doc["clearances"] == ["x.other"] for d in fleet)
    assert not any(fleet.holds_session(f"ag{i}", s) for i in range(3) for s in ("s", "t"))


def test_asking_for_a_name_between_the_steps_of_its_joining_finds_no_agent(engine):
    fleet = a3fast.Fleet(engine=engine)
    fleet.add(decl("here"))
    table = fleet._table
    # how `AgentTable.new_id` leaves the table between its steps, as another thread may see it:
    # the name's id given, its entry not yet appended
    table.ids["joining"] = len(table.entries)
    assert "joining" not in fleet and "here" in fleet and "absent" not in fleet and 3 not in fleet

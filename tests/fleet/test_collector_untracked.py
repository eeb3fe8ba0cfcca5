"""What the native engine lets out of the cyclic collector's passes, and what it must not.

A placement makes a few small containers that can never be part of a cycle: a task's tuples of
names and predicates, its resolved rows. The compiled reader and the rows' resolution untrack them
when they are made (CPython's own rule for a tuple, applied at once), so the young collection a
batch of placements meets does not walk them (docs/performance.md, "Containers the collector need
not walk"). What can lead back to a caller's objects — the Requirements, which holds the caller's
document, and the Placement — stays tracked: a cycle through them is still collected.
"""
from __future__ import annotations

import gc
import weakref

import pytest

from a3fast import Fleet, parse_requirements
from a3fast.engines import NATIVE_AVAILABLE
from a3fast.schema import requirements_reader
from a3fast.workload import generate_fleet

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the a3fast._core extension is not built")

TASK = {"v": "1.0", "capabilities": [{"name": "order.triage", "version": 1}],
        "clearances": ["orders.read"], "tools": ["mcp:jira/create"], "exclude": ["agent-000001"]}


class Probe:
    """Something weakly referable to put in a cycle."""


def fleet() -> Fleet:
    f = Fleet(engine="native")
    f.extend(generate_fleet(50, seed=3))
    return f


def test_reader_tuples_are_untracked():
    req = parse_requirements(dict(TASK))
    for field in ("capabilities", "clearances", "tools", "exclude", "predicates"):
        value = getattr(req, field)
        assert value and not gc.is_tracked(value), field
    assert not gc.is_tracked(req.capabilities[0])
    # the Requirements holds the caller's document: it may lead back, so the collector keeps it
    assert gc.is_tracked(req)


def test_tuple_holding_a_tracked_item_stays_tracked():
    # a Capability the pure engine's reader made is a tracked tuple in the memo both readers share;
    # the compiled reader's tuple holding it stays tracked
    name = "untracked.probe"
    made = requirements_reader("pure")({"capabilities": [{"name": name, "version": 7}]}, True)
    assert made is not None and gc.is_tracked(made.capabilities[0])
    req = parse_requirements({"capabilities": [{"name": name, "version": 7}]})
    assert gc.is_tracked(req.capabilities[0])
    assert gc.is_tracked(req.capabilities)


def test_resolved_rows_are_untracked_and_the_placement_is_not():
    f = fleet()
    p = f.place(dict(TASK))
    assert isinstance(p.eval_rows, list) and not gc.is_tracked(p.eval_rows)
    assert gc.is_tracked(p)


def test_a_cycle_through_the_callers_document_is_still_collected():
    doc = dict(TASK)
    req = parse_requirements(doc)
    probe = Probe()
    doc["probe"], doc["parsed"] = probe, req       # doc -> Requirements -> doc
    gone = weakref.ref(probe)
    del doc, req, probe
    gc.collect()
    assert gone() is None


def test_a_cycle_through_a_placement_is_still_collected():
    f = fleet()
    doc = dict(TASK)
    p = f.place(doc)
    probe = Probe()
    doc["probe"], doc["placement"] = probe, p      # doc -> Placement -> its requirements -> doc
    gone = weakref.ref(probe)
    del doc, p, probe
    gc.collect()
    assert gone() is None


def test_placements_match_the_pure_engine():
    # untracking changes no value: the same placements on both engines
    tasks = [dict(TASK), {"v": "1.0", "clearances": ["orders.read"]}]
    native, pure = Fleet(engine="native"), Fleet(engine="pure")
    for f in (native, pure):
        f.extend(generate_fleet(50, seed=3))
    assert [p.agent for p in native.place_many(tasks)] == [p.agent for p in pure.place_many(tasks)]

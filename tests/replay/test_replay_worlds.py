"""The differential test of baseline replay: random worlds of plain, routed, resumed, filter-style and
offered-candidate placements, sessions given in the requirements and beside them, written in the
spec and the compact form with their members in any order; a random fleet and policy change; and
every verdict must be what placing the same tasks from scratch on both fleets gives — read
literally (tests/oracle.py), from what the test itself knows of each task, not from the trace.

Placing from scratch on a fleet F, in trace order: a task is placed over the candidates it was
offered that F holds (all of F's agents new to it too with `offer_new`), with its session, held
when the placement was made to hold it; a resumption goes to wherever its task went on F, if that
agent satisfies every predicate it matched (read literally, tests/oracle.py)."""
from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import a3fast
from a3fast.record.compact import encode_trace
from a3fast.record.write import placement_records
from a3fast.replay import (MOVED, SAME, SCHEDULABLE, STILL_REJECTED, UNSCHEDULABLE, replay, run_replay,
                           summarise)

from oracle import DEFAULT_WEIGHTS, FleetModel, choose, every_failed, predicates_of
from strategies import CLEARANCES, NAMES, declarations, requirements

MODES = ("plain", "routed", "resumed", "offered", "filter")
ROUTE = a3fast.Route("audit", {"clearances": ["r.read"]})


@st.composite
def worlds(draw):
    docs = draw(st.lists(declarations(), min_size=1, max_size=7, unique_by=lambda d: d["agent"]["name"]))
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        req = draw(requirements())
        mode = draw(st.sampled_from(MODES))
        session = None
        if draw(st.booleans()):            # a session beside the requirements (as the service body gives it)
            session = draw(st.sampled_from(["s1", "s2"]))
        offered = None
        if mode in ("offered", "filter"):
            offered = draw(st.lists(st.sampled_from(NAMES + ["not-an-agent"]), unique=True, max_size=8))
        steps.append((mode, req, session, offered))
    form = draw(st.sampled_from(["spec", "compact"]))
    order = draw(st.sampled_from(["as written", "reversed"]))
    removed = draw(st.lists(st.sampled_from([d["agent"]["name"] for d in docs]), unique=True, max_size=2))
    revoked = draw(st.sampled_from([None, *CLEARANCES]))
    added = draw(st.lists(declarations(), max_size=2, unique_by=lambda d: d["agent"]["name"]))
    weights = draw(st.sampled_from([None, (0.0, 0.0, 1.0, 0.0), (1.0, 0.5, 0.0, 0.0)]))
    offer_new = draw(st.booleans())
    return docs, steps, form, order, (removed, revoked, added, weights), offer_new


def record(docs, steps, engine):
    """Place the steps on a fleet of `docs` as the writers do; the trace's records (spec dicts) and,
    per placement, what the test knows of it: (matched requirements, session, offered, holds,
    index of the placement it resumes or None)."""
    fleet = a3fast.Fleet(engine=engine)
    fleet.extend(docs)
    records, known, bound = [], [], []
    for mode, req, session, offered in steps:
        if mode == "resumed" and bound:
            earlier_p, earlier_i = bound[-1]
            try:
                p = fleet.resume(earlier_p, seq=earlier_p.seq)
            except a3fast.A3Error:
                continue
            resumes = earlier_i
            holds = True
        else:
            route = ROUTE if mode == "routed" else None
            try:
                p = fleet.place(req, session=session, route=route, candidates=offered,
                                remember_session=mode != "filter")
            except a3fast.A3Error:   # a route that would change what the task states
                continue
            if mode == "filter":
                p.session_held = False
            resumes = None
            holds = mode != "filter"
        seq = len(records) + 1
        for kind, content in placement_records(p):
            records.append({"seq": len(records) + 1, "kind": kind, "content": orjson.loads(content)})
        p.seq = len(records)   # the placement record is the last of its records
        assert records[-1]["kind"] in ("task.bound", "task.rejected") and seq <= p.seq
        cands = None if p.resumed else [r for r in (offered if offered is not None else fleet.names()) if r in fleet]
        known.append((p.requirements.doc, p.session, cands, holds, resumes, p.agent))
        if p.agent is not None and not p.resumed:
            bound.append((p, len(known) - 1))
    return records, known


def from_scratch(fleet_docs, known, weights=None, extra=()):
    """Each placement's agent when the tasks are placed from scratch on a fleet of `fleet_docs`,
    read literally (tests/oracle.py): the scores of the offered agents, the winner, and the session
    it then holds."""
    model = FleetModel(weights or DEFAULT_WEIGHTS)
    for doc in fleet_docs:
        model.add(doc)
    out = []
    for matched, session, cands, holds, resumes, _ in known:
        matched = dict(matched)
        if resumes is not None:
            agent = out[resumes]
            decl = model.docs.get(agent) if agent is not None else None
            out.append(agent if decl is not None and not every_failed(decl, predicates_of(matched)) else None)
            continue
        offered = set(cands) | set(extra)
        scores = {n: e for n, e in model.scores(matched, session).items() if n in offered}
        winner = choose(scores)
        held = session if session is not None else matched.get("session")
        if winner is not None and held is not None and holds:
            model.hold(winner, held)
        out.append(winner)
    return out


def reorder(value, order):
    """The same JSON value with every object's members in another order."""
    if isinstance(value, dict):
        items = [(k, reorder(v, order)) for k, v in value.items()]
        return dict(reversed(items) if order == "reversed" else items)
    if isinstance(value, list):
        return [reorder(v, order) for v in value]
    return value


def kind_of(before, after):
    if before is not None and after is not None:
        return SAME if before == after else MOVED
    return UNSCHEDULABLE if before is not None else SCHEDULABLE if after is not None else STILL_REJECTED


@settings(max_examples=120, deadline=None)
@given(worlds())
def test_baseline_replay_equals_placing_from_scratch_on_both_fleets(engine, world):
    docs, steps, form, order, (removed, revoked, added, weights), offer_new = world
    records, known = record(docs, steps, engine)
    if form == "compact":
        records = list(encode_trace(records))
    trace = b"".join(orjson.dumps(reorder(r, order)) + b"\n" for r in records)
    names = {d["agent"]["name"] for d in docs}
    proposed_docs = [{**d, "clearances": [c for c in d["clearances"] if c != revoked]}
                     for d in docs if d["agent"]["name"] not in removed]
    proposed_docs += [d for d in added if d["agent"]["name"] not in names]
    current, proposed = (a3fast.Fleet(engine=engine) for _ in range(2))
    current.extend(docs)
    proposed.extend(proposed_docs)

    verdicts = list(replay(trace, proposed, baseline=current, weights=weights, offer_new=offer_new))
    new = [d["agent"]["name"] for d in proposed_docs if d["agent"]["name"] not in names] if offer_new else []
    before = from_scratch(docs, known)
    after = from_scratch(proposed_docs, known, weights, extra=new)
    assert len(verdicts) == len(known)
    for v, b, a in zip(verdicts, before, after):
        assert (v.kind, v.before, v.after) == (kind_of(b, a), b, a), v

    # the same fleet, in baseline and in recorded-decision mode: nothing changes
    assert summarise(replay(trace, current, baseline=current)).changed == 0
    recorded = list(replay(trace, current))
    assert [v.after for v in recorded] == [k[5] for k in known]
    assert not [v for v in recorded if v.changed]


@settings(max_examples=40, deadline=None)
@given(worlds())
def test_a_trace_as_records_bytes_and_chunks_replays_alike(engine, world):
    docs, steps, form, order, _, _ = world
    records, _ = record(docs, steps, engine)
    if form == "compact":
        records = list(encode_trace(records))
    trace = b"".join(orjson.dumps(reorder(r, order)) + b"\n" for r in records)
    fleet = a3fast.Fleet(engine=engine)
    fleet.extend(docs)
    want = [v.to_dict() for v in replay(records, fleet)]
    assert [v.to_dict() for v in replay(trace, fleet)] == want
    assert [v.to_dict() for v in replay([trace[i:i + 7] for i in range(0, len(trace), 7)], fleet)] == want
    summary, _ = run_replay(trace, fleet)
    assert summary.placements == len(want) and summary.fleet.digest.startswith("sha256:")

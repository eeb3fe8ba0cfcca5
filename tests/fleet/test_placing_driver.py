"""Every placement crosses one driver (a3fast.fleet.pipeline.drive, or for a batch of one on the
native engine its compiled twin, `_core.place_one`): Fleet.place, place_many,
Fleet.scored (what a shard answers with), Fleet.resume, a stdio `place` line and POST /v1/place. A single
placement is a batch of one, so placing one by one and placing a batch give the same compact
records, byte for byte, on both engines."""
from __future__ import annotations

import asyncio
import io

import orjson
import pytest

from a3fast import FleetError, Route
from a3fast.fleet import Fleet, pipeline
from a3fast.fleet.pipeline import LocalStages, Resumption, Stages
from a3fast.fleet.placement import Placement
from a3fast.record.compact import Encoder
from a3fast.workload import generate_fleet, generate_tasks

from test_place_many import strip_timings, threads_for_small_worlds, world  # noqa: F401 (a fixture)

FLEET = generate_fleet(30, seed=3)
TASKS = generate_tasks(FLEET, 6, seed=3)


@pytest.fixture
def crossings(monkeypatch) -> list[int]:
    """How many tasks each call of the driver was given, call by call (the driver itself runs):
    `pipeline.drive`, or on a native fleet its compiled twin for a batch of one (`_core.place_one`,
    what Fleet.place calls; it hands the driver bound at import what it does not place itself, so
    a call is counted once)."""
    calls: list[int] = []
    real = pipeline.drive

    def counted(stages, tasks, *args, **kwargs):
        calls.append(len(tasks))
        return real(stages, tasks, *args, **kwargs)

    real_steps = pipeline.stage_steps

    def steps(engine: str) -> pipeline.StageSteps:
        found = real_steps(engine)
        if found.place_one is pipeline.place_one:       # the Python one calls `drive`, counted there
            return found
        compiled = found.place_one

        def counted_one(stages, task, *args):
            calls.append(1)
            return compiled(stages, task, *args)

        return found._replace(place_one=counted_one)

    monkeypatch.setattr(pipeline, "drive", counted)
    monkeypatch.setattr(pipeline, "stage_steps", steps)
    return calls


def test_a_fleets_stages_are_the_stages_the_driver_names():
    fleet = Fleet()
    assert isinstance(fleet._stages, LocalStages) and isinstance(fleet._stages, Stages)
    assert not isinstance(object(), Stages)


def test_place_place_many_and_scored_cross_the_driver(crossings):
    fleet = Fleet()
    fleet.extend(FLEET)
    fleet.place(TASKS[0])
    fleet.place_many(TASKS)
    fleet.scored(TASKS[1])
    assert crossings == [1, len(TASKS), 1]


def test_a_stdio_place_line_crosses_the_driver(crossings):
    from a3fast.service.operations import Operations
    from a3fast.service.state import ServiceState
    from a3fast.service.stdio import serve_stdio_sync

    state = ServiceState(None)
    state.open()
    try:
        out = io.BytesIO()
        lines = [orjson.dumps({"op": "put_agents", "id": "load", "declarations": FLEET}),
                 orjson.dumps({"op": "place", "id": 1, "requirements": TASKS[0]})]
        serve_stdio_sync(Operations(state), io.BytesIO(b"\n".join(lines)), out, max_line=1 << 20)
    finally:
        state.close()
    answers = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [a["ok"] for a in answers] == [True, True], answers
    assert crossings == [1]


def test_post_v1_place_crosses_the_driver(crossings):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("starlette")
    from a3fast.service.app import create_app
    from a3fast.service.config import ServiceConfig

    app = create_app(ServiceConfig())

    async def run() -> dict:
        async with app.router.lifespan_context(app):
            while not app.state.service.ready:
                await asyncio.sleep(0.01)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://a3fast") as client:
                for agent in FLEET:
                    (await client.put(f"/v1/agents/{agent['agent']['name']}", json=agent)).raise_for_status()
                answer = await client.post("/v1/place", json={"requirements": TASKS[0], "session": "s1"})
                answer.raise_for_status()
                return answer.json()

    answer = asyncio.run(run())
    assert answer["records"][0]["kind"] == "task.submitted"
    assert crossings == [1]


@pytest.mark.parametrize("remember_session", [True, False])
def test_compact_records_of_a_batch_are_byte_identical_to_one_by_one(engine, remember_session):
    one, tasks = world(engine, 31)
    many, _ = world(engine, 31)
    expected = [one.place(t, remember_session=remember_session) for t in tasks]
    got = many.place_many(tasks, workers=2, remember_session=remember_session)
    # one encoder per trace, each given its placements in order, as a service writes them
    one_trace, many_trace = Encoder(), Encoder()
    for seq, (e, g) in enumerate(zip(expected, got), 1):
        assert strip_timings(many_trace.encode_placement(seq, g)) == strip_timings(one_trace.encode_placement(seq, e))
    assert many.generation == one.generation


def test_a_custom_scorer_batch_gives_one_by_ones_records(engine):
    def by_name(task, agents):
        return [{"total": float(len(a.agent.name) % 5)} for a in agents]

    one, tasks = world(engine, 32)
    many, _ = world(engine, 32)
    expected = [one.place(t, scorer=by_name) for t in tasks]
    got = many.place_many(tasks, workers=2, scorer=by_name)
    one_trace, many_trace = Encoder(), Encoder()
    for seq, (e, g) in enumerate(zip(expected, got), 1):
        assert (e.agent, e.generation) == (g.agent, g.generation)
        assert strip_timings(many_trace.encode_placement(seq, g)) == strip_timings(one_trace.encode_placement(seq, e))


def test_generation_is_numbered_in_the_tasks_order_across_waves(engine):
    # a task of a second session after a repeated one: the waves decide it first, the numbering
    # is still that of one by one
    one, tasks = world(engine, 33)
    many, _ = world(engine, 33)
    batch = [dict(tasks[0], session="a"), dict(tasks[1], session="a"), dict(tasks[2], session="b"),
             dict(tasks[3], session="a"), dict(tasks[4], session="c")]
    expected = [(p.agent, p.generation) for p in (one.place(t) for t in batch)]
    assert [(p.agent, p.generation) for p in many.place_many(batch)] == expected
    assert many.generation == one.generation


def test_holding_a_session_is_one_function(engine):
    fleet = Fleet(engine)
    fleet.extend(FLEET)
    name = FLEET[0]["agent"]["name"]
    generation = fleet.generation
    fleet.hold_session(name, "s")
    fleet.hold_session(name, "s")        # the public call counts every call, as it always has
    assert fleet.holds_session(name, "s") and fleet.generation == generation + 2
    assert fleet._rows.hold(fleet._table.ids[name], "s") is False     # already held


def resumable(engine: str) -> tuple[Fleet, Placement]:
    """A fleet and a bound placement of a session in it, through a route (its routed requirements
    are what a resumption is held to)."""
    fleet = Fleet(engine)
    fleet.add(support_agent("a", "eu"))
    first = fleet.place(ORDERS, session="s", route=EU_ONLY)
    assert first.agent == "a" and fleet.holds_session("a", "s")
    return fleet, first


def support_agent(name: str, residency: str) -> dict:
    return {"v": "1.0", "agent": {"name": name, "namespace": "support"}, "capabilities": [],
            "clearances": ["orders.read"], "residency": [residency]}


ORDERS = {"v": "1.0", "clearances": ["orders.read"]}
EU_ONLY = Route("eu-only", {"residency": "eu"})


def test_resume_crosses_the_driver_and_holds_nothing(engine, crossings):
    fleet, first = resumable(engine)
    generation = fleet.generation
    again = fleet.resume(first, seq=7)
    assert crossings == [1, 1]
    assert again.resumed and again.recorded_in == 7 and again.agent == "a" and again.session == "s"
    # decided nothing: the earlier cycle's explanation and scores, carried over
    assert again.explanation is first.explanation and again.scores is first.scores
    assert fleet.generation == generation == again.generation


def test_resume_for_a_given_declaration_crosses_the_driver_with_the_same_record(engine, crossings):
    # pipeline.resume: what a sharded fleet's coordinator calls with the declaration it looked up
    fleet, first = resumable(engine)
    aid = fleet._table.ids["a"]
    given = pipeline.resume(first, engine, fleet.get("a"), fleet.declaration_json(aid), fleet.generation, 2)
    local = fleet.resume(first, seq=2)
    assert crossings == [1, 1, 1]
    assert strip_timings(Encoder().encode_placement(3, given)) == strip_timings(Encoder().encode_placement(3, local))


def test_a_resumption_in_a_batch_decides_nothing_and_holds_nothing(engine):
    fleet, first = resumable(engine)
    fleet.add(support_agent("b", "eu"))
    generation = fleet.generation
    placed, after = pipeline.drive(fleet._stages, [dict(ORDERS, session="t"), Resumption(first, 1)],
                                   None, generation)
    assert [p.resumed for p in placed] == [False, True]
    assert placed[1].explanation is first.explanation and placed[1].recorded_in == 1
    assert after == generation + 1 == fleet.generation + 1      # the first task's hold only


def test_a_resumption_whose_agent_left_raises_the_same_fleet_error(engine, crossings):
    fleet, first = resumable(engine)
    fleet.remove("a")
    with pytest.raises(FleetError, match=r"^cannot resume on 'a': the agent is no longer in the fleet$"):
        fleet.resume(first)
    with pytest.raises(FleetError, match=r"^cannot resume on 'a': the agent is no longer in the fleet$"):
        pipeline.resume(first, engine, None, None, fleet.generation, None)
    assert crossings == [1, 1, 1]


def test_a_resumption_that_no_longer_satisfies_a_predicate_raises_the_same_fleet_error(engine, crossings):
    fleet, first = resumable(engine)
    fleet.add(support_agent("a", "us"))      # re-declared: no longer where the route sent the task
    with pytest.raises(FleetError, match=r"^cannot resume on 'a': its declaration no longer satisfies residency:eu$"):
        fleet.resume(first)
    assert crossings == [1, 1]


def test_only_a_bound_placement_is_resumed_through_the_driver(engine, crossings):
    fleet = Fleet(engine)
    unbound = fleet.place(ORDERS)
    with pytest.raises(FleetError, match=r"^only a bound placement can be resumed$"):
        fleet.resume(unbound)
    assert crossings == [1, 1]

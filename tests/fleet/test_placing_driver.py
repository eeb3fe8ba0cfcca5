"""Every placement crosses one driver (a3fast.fleet.pipeline.drive): Fleet.place, place_many,
Fleet.scored (what a shard answers with), a stdio `place` line and POST /v1/place. A single
placement is a batch of one, so placing one by one and placing a batch give the same compact
records, byte for byte, on both engines."""
from __future__ import annotations

import asyncio
import io

import orjson
import pytest

from a3fast.fleet import Fleet, pipeline
from a3fast.fleet.pipeline import LocalStages, Stages
from a3fast.record.compact import Encoder
from a3fast.workload import generate_fleet, generate_tasks

from test_place_many import strip_timings, world

FLEET = generate_fleet(30, seed=3)
TASKS = generate_tasks(FLEET, 6, seed=3)


@pytest.fixture
def crossings(monkeypatch) -> list[int]:
    """How many tasks each call of the driver was given, call by call (the driver itself runs)."""
    calls: list[int] = []
    real = pipeline.drive

    def counted(stages, tasks, *args, **kwargs):
        calls.append(len(tasks))
        return real(stages, tasks, *args, **kwargs)

    monkeypatch.setattr(pipeline, "drive", counted)
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

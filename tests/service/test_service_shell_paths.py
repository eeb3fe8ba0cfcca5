"""The service shell's short ways to the same answers: the single HTTP answer framed around its
records, and the unschedulable counter labelled from a rejection's failed counts without a dict of
them. Each is held to the plain definition it replaces, byte for byte or value for value."""
from __future__ import annotations

import asyncio

import orjson
import pytest

from a3fast.fleet import Fleet
from a3fast.service import metrics
from a3fast.workload import generate_fleet, generate_tasks

FLEET = generate_fleet(60, seed=11)
TASKS = generate_tasks(FLEET, 40, seed=11)


def test_a_single_http_answer_is_its_records_as_the_trace_holds_them():
    """The answer to one POST /v1/place is `{"records": [...]}` whose records are the trace's lines
    of that placement, byte for byte (spec records, and the first compact ones, which carry their
    snapshot whole as the trace does)."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("starlette")
    from a3fast.service.app import create_app
    from a3fast.service.config import ServiceConfig

    app = create_app(ServiceConfig())

    async def run() -> tuple[list[bytes], bytes]:
        async with app.router.lifespan_context(app):
            state = app.state.service
            while not state.ready:
                await asyncio.sleep(0.01)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://a3fast") as client:
                bulk = b"".join(orjson.dumps(d) + b"\n" for d in FLEET)       # JSON Lines
                (await client.post("/v1/agents", content=bulk)).raise_for_status()
                bodies = []
                for k, task in enumerate(TASKS[:6]):
                    record = {} if k % 2 == 0 else {"record": "compact"}
                    answer = await client.post("/v1/place", json={"requirements": task, **record})
                    answer.raise_for_status()
                    assert answer.headers["content-length"] == str(len(answer.content))
                    assert answer.headers["content-type"] == "application/json"
                    bodies.append(answer.content)
                trace = await client.get("/v1/trace")
                return bodies, trace.content

    bodies, trace = asyncio.run(run())
    lines = trace.splitlines()
    by_seq = {orjson.loads(line)["seq"]: line for line in lines}
    # the spec answers, and the first compact one; a later compact answer carries the snapshot the
    # trace refers to by seq
    for k in (0, 1, 2, 4):
        seqs = [r["seq"] for r in orjson.loads(bodies[k])["records"]]
        assert bodies[k] == b'{"records":[' + b",".join(by_seq[s] for s in seqs) + b"]}"


def _unschedulable_values() -> dict[str, float]:
    from prometheus_client import REGISTRY

    return {s.labels["predicate_kind"]: s.value for m in REGISTRY.collect() if m.name == "a3fast_unschedulable"
            for s in m.samples if s.name == "a3fast_unschedulable_total"}


def test_unschedulable_counts_by_kind_as_the_failed_counts_give_them():
    """Each rejection counts once for each kind of predicate whose failed count is not 0 (or once
    as "none"), as read from `Placement.failed_counts()`."""
    pytest.importorskip("prometheus_client")
    fleet = Fleet()
    fleet.extend(FLEET[:20])        # a small fleet: many rejections, by several kinds
    placements = [fleet.place(task) for task in TASKS]
    rejected = [p for p in placements if not p.bound]
    assert len(rejected) >= 5
    expected: dict[str, int] = {}
    for p in rejected:
        kinds = {metrics.predicate_kind(pred) for pred, n in p.failed_counts().items() if n} or {"none"}
        for kind in kinds:
            expected[kind] = expected.get(kind, 0) + 1
    before = _unschedulable_values()
    metrics.count_placements(placements)
    after = _unschedulable_values()
    moved = {kind: after[kind] - before.get(kind, 0.0) for kind in after if after[kind] != before.get(kind, 0.0)}
    assert moved == expected


def test_the_predicate_kinds_kept_are_bounded():
    for k in range(metrics._KINDS_KEPT + 10):
        assert metrics._new_kind(f"hostile-{k}:x") == "other"
    assert len(metrics._KIND_OF) <= metrics._KINDS_KEPT
    assert metrics._new_kind("capability:a.b@1") == "capability"
    assert metrics._KIND_OF["capability:a.b@1"] == "capability"     # kept, for the next lookup


def test_the_collector_paused_for_each_stdio_batch_runs_again_after_it():
    """`serve_stdio_sync` pauses the cyclic collector while it answers a batch; it runs again once
    the batch is written (and stays off for a program that had it off)."""
    import gc
    import io

    from a3fast.schema import parse_declaration
    from a3fast.service.operations import Operations
    from a3fast.service.state import ServiceState
    from a3fast.service.stdio import serve_stdio_sync

    requests = b"".join(orjson.dumps({"op": "place", "id": k, "requirements": t, "record": "compact-stream"}) + b"\n"
                        for k, t in enumerate(TASKS))
    for enabled in (True, False):
        state = ServiceState()
        state.open()
        try:
            state.put_agents([parse_declaration(d) for d in FLEET])
            out = io.BytesIO()
            (gc.enable if enabled else gc.disable)()
            serve_stdio_sync(Operations(state, stream=True), io.BytesIO(requests), out, 1 << 20)
            assert gc.isenabled() is enabled
            answers = [orjson.loads(line) for line in out.getvalue().splitlines()]
            assert [a["id"] for a in answers] == list(range(len(TASKS))) and all(a["ok"] for a in answers)
        finally:
            gc.enable()
            state.close()


def _placements_counted() -> dict[str, float]:
    return dict(metrics.PLACEMENTS.counts)


def _record_kinds(answers: bytes) -> list[list[str]]:
    return [[r["kind"] for r in orjson.loads(line)["records"]] for line in answers.splitlines()]


def test_placements_are_counted_only_by_a_service_that_serves_its_metrics():
    """An HTTP service counts its placements for /metrics (`Operations(counted=True)`, the
    default); a stdio service, which nothing could read metrics from, counts none, and answers
    alike."""
    import io

    from a3fast.schema import parse_declaration
    from a3fast.service.operations import Operations
    from a3fast.service.state import ServiceState
    from a3fast.service.stdio import serve_stdio_sync

    requests = b"".join(orjson.dumps({"op": "place", "id": k, "requirements": t, "record": "compact-stream"}) + b"\n"
                        for k, t in enumerate(TASKS))
    answers = {}
    for counted in (True, False):
        state = ServiceState()
        state.open()
        try:
            state.put_agents([parse_declaration(d) for d in FLEET[:20]])
            out = io.BytesIO()
            before = _placements_counted()
            serve_stdio_sync(Operations(state, stream=True, counted=counted), io.BytesIO(requests), out, 1 << 20)
            after = _placements_counted()
        finally:
            state.close()
        moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        answers[counted] = _record_kinds(out.getvalue())
        if counted:
            bound = sum("task.bound" in kinds for kinds in answers[counted])
            assert 0 < bound < len(TASKS)
            assert moved == {"bound": bound, "unschedulable": len(TASKS) - bound}
        else:
            assert moved == {}
    assert answers[True] == answers[False]

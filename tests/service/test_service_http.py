"""The HTTP API of `a3fast serve`, against a real server process and a real HTTP client."""
from __future__ import annotations

import json

import httpx
import jsonschema
import orjson
import pytest

from a3fast.service.openapi import PATHS, load_schema, schema_names
from service_process import SECTION_10_AGENTS, SECTION_10_TASK, Server, put_section_10_agents

pytest.importorskip("starlette")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server("--state", str(tmp_path_factory.mktemp("state")))
    put_section_10_agents(s.client)
    yield s
    assert s.stop() == 0


def valid(name, value):
    jsonschema.validate(value, load_schema(name))
    return value


def test_placement_returns_the_section_10_records(server):
    r = server.client.post("/v1/place", json={"requirements": SECTION_10_TASK})
    assert r.status_code == 200
    records = valid("place.response", r.json())["records"]
    assert [x["kind"] for x in records] == ["task.submitted", "task.admitted", "task.bound"]
    s = records[2]["content"]["scheduling"]
    assert s["candidates"] == ["order-analyst", "summariser"]
    assert s["filters_passed"] == ["capability:order.investigate/2", "clearance:orders.read", "residency:eu"]
    assert s["filters_failed"] == [{"candidate": "summariser", "predicate": "capability:order.investigate/2"}]
    assert list(s["scores"]) == ["order-analyst"]
    assert [x["seq"] for x in records] == list(range(records[0]["seq"], records[0]["seq"] + 3))


def test_unschedulable_is_200_with_a_rejection(server):
    r = server.client.post("/v1/place", json={"requirements": {"v": "1.0", "capabilities": [
        {"name": "order.investigate", "version": 9}]}})
    assert r.status_code == 200
    assert [x["kind"] for x in r.json()["records"]] == ["task.submitted", "task.rejected"]


def test_compact_records_decode_to_the_spec_form(server):
    from a3fast.record.compact import decode_trace, is_compact

    r = server.client.post("/v1/place?record=compact", json={"requirements": SECTION_10_TASK})
    bound = r.json()["records"][2]
    assert is_compact(bound["content"])
    trace = [orjson.loads(line) for line in server.client.get("/v1/trace").content.splitlines()]
    decoded = {rec["seq"]: rec for rec in decode_trace(trace)}
    assert decoded[bound["seq"]]["content"]["scheduling"]["candidates"] == ["order-analyst", "summariser"]


def test_trace_since_streams_later_records_and_verifies(server):
    first = server.client.post("/v1/place", json={"requirements": SECTION_10_TASK}).json()["records"]
    since = first[0]["seq"] - 1
    lines = server.client.get(f"/v1/trace?since={since}").content.splitlines()
    assert [orjson.loads(x)["seq"] for x in lines][:3] == [r["seq"] for r in first]
    whole = server.client.get("/v1/trace").content
    result = valid("verify.response", server.client.post("/v1/verify", content=whole).json())
    assert result["valid"], result


def test_verify_reports_a_broken_trace(server):
    result = server.client.post("/v1/verify", content=b'{"seq":1,"kind":"task.bound","content":{}}\n').json()
    assert result["valid"] is False and result["errors"]


def test_put_with_a_different_name_in_the_path_is_422(server):
    r = server.client.put("/v1/agents/someone-else", json=SECTION_10_AGENTS[0])
    assert r.status_code == 422
    assert valid("error", r.json())["problems"][0]["path"] == "$.agent.name"


def test_bad_declaration_is_400_with_the_library_problems(server):
    r = server.client.put("/v1/agents/x", json={"v": "1.0", "agent": {"name": "x", "namespace": "n"},
                                                 "capabilities": [{"name": "case.x", "version": True}], "clearances": []})
    assert r.status_code == 400
    assert valid("error", r.json())["problems"] == [
        {"path": "$.capabilities[0].version",
         "expected": "a major version (an integer from 0 to 2^63-1)", "found": "true"}]
    assert server.client.get("/v1/agents/x").status_code == 404


def test_get_and_delete_an_absent_agent_are_404(server):
    assert server.client.get("/v1/agents/nobody").status_code == 404
    assert server.client.delete("/v1/agents/nobody").status_code == 404


def test_name_held_by_another_namespace_is_409(server):
    other = {**SECTION_10_AGENTS[1], "agent": {"name": "summariser", "namespace": "elsewhere"}}
    r = server.client.put("/v1/agents/summariser", json=other)
    assert r.status_code == 409
    [found] = r.json()["problems"]
    assert found["path"] == "$.agent.namespace" and "line" not in found


def test_bulk_add_is_all_or_nothing_and_names_the_bad_line(server):
    good = {"v": "1.0", "agent": {"name": "bulk-1", "namespace": "b"}, "capabilities": [], "clearances": []}
    body = orjson.dumps(good) + b"\n\n" + b'{"v": "1.0", "agent": {"name": "bulk-2"}}\n'
    r = server.client.post("/v1/agents", content=body)
    assert r.status_code == 400
    assert {p["line"] for p in r.json()["problems"]} == {3}
    assert server.client.get("/v1/agents/bulk-1").status_code == 404
    r = server.client.post("/v1/agents", content=body + b"not json\n")
    assert {p["line"] for p in r.json()["problems"]} == {3, 4}
    ok = b"\n".join(orjson.dumps({**good, "agent": {"name": f"bulk-{k}", "namespace": "b"}}) for k in range(5))
    assert valid("put_agents.response", server.client.post("/v1/agents", content=ok).json()) == {"count": 5}


def test_a_bulk_add_holding_one_name_in_two_namespaces_is_409_and_changes_and_journals_nothing(tmp_path):
    """The batch's own names count as held: the second namespace of a name is refused before
    anything is applied, so no agent of the batch is served without its journal entry."""
    from a3fast.durable.journal import read_entries

    state = tmp_path / "state"
    s = Server("--state", str(state))
    try:
        before = {"v": "1.0", "agent": {"name": "kept", "namespace": "a"}, "capabilities": [], "clearances": []}
        assert s.client.put("/v1/agents/kept", json=before).status_code == 200
        # blank lines between them: the 409 names the line the declaration is on, not its place
        body = b"\n\n".join(orjson.dumps({**before, "agent": {"name": name, "namespace": ns}})
                            for name, ns in (("first", "a"), ("twice", "a"), ("twice", "b")))
        r = s.client.post("/v1/agents", content=body)
        assert r.status_code == 409, r.text
        assert [(p["path"], p["line"]) for p in r.json()["problems"]] == [("$.agent.namespace", 5)]
        for name in ("first", "twice"):
            assert s.client.get(f"/v1/agents/{name}").status_code == 404
        assert s.client.get("/v1/agents").json()["names"] == ["kept"]
    finally:
        s.kill()                  # no checkpoint: the journal holds every entry written
    (journal,) = state.glob("journal.*")
    assert [orjson.loads(e[1:])["op"] for e in read_entries(journal.read_bytes()).entries] == ["put"]


def test_agent_names_are_paged(server):
    first = valid("list_agents.response", server.client.get("/v1/agents?limit=2").json())
    assert len(first["names"]) == 2 and first["next"] == first["names"][-1]
    rest = server.client.get(f"/v1/agents?after={first['next']}&limit=10000").json()
    names = first["names"] + rest["names"]
    assert names == sorted(names) and rest["next"] is None
    assert server.client.get("/v1/agents?limit=0").status_code == 400


def test_outcomes_and_sessions_change_scores(server):
    r = server.client.post("/v1/outcomes", json={"agent": "order-analyst", "requirements": SECTION_10_TASK,
                                                 "success": True})
    assert valid("outcome.response", r.json())["attempts"] >= 1
    assert server.client.put("/v1/sessions/s-1/order-analyst").json()["held"] is True
    rec = server.client.post("/v1/place", json={"requirements": SECTION_10_TASK, "session": "s-1"}).json()
    assert rec["records"][2]["content"]["scheduling"]["scores"]["order-analyst"]["affinity"] == 1.0
    assert server.client.delete("/v1/sessions/s-1/order-analyst").json()["held"] is False
    assert server.client.post("/v1/outcomes", json={"agent": "nobody", "kind": "k", "success": True}).status_code == 404
    assert server.client.post("/v1/outcomes", json={"agent": "order-analyst", "success": True}).status_code == 400


def test_bad_json_and_deep_nesting_are_400(server):
    assert server.client.post("/v1/place", content=b"{").status_code == 400
    deep = b'{"requirements":' + b"[" * 40 + b"]" * 40 + b"}"
    r = server.client.post("/v1/place", content=deep)
    assert r.status_code == 400 and r.json()["problems"][0]["expected"] == "at most 32 nested arrays and objects"


def test_route_that_would_change_a_requirement_is_422(server):
    r = server.client.post("/v1/place", json={"requirements": SECTION_10_TASK,
                                               "route": {"name": "us-only", "adds": {"residency": "us"}}})
    assert r.status_code == 422


def test_health_readiness_and_metrics(server):
    assert server.client.get("/healthz").json() == {"status": "ok"}
    assert server.client.get("/readyz").status_code == 200
    text = server.client.get("/metrics").text
    for name in ("a3fast_placements_total", "a3fast_request_seconds_bucket", "a3fast_fleet_agents",
                 "a3fast_journal_lag_bytes", "a3fast_unschedulable_total"):
        assert name in text


def test_every_route_is_in_the_openapi_document(server):
    from a3fast.service.app import create_app
    from a3fast.service.config import ServiceConfig

    document = server.client.get("/v1/openapi.json").json()
    app = create_app(ServiceConfig())
    # {name:rest}: the document names the parameter {name} (it may hold "/")
    served = {(route.path.replace(":rest}", "}"), method.lower()) for route in app.routes
              for method in route.methods if method != "HEAD"}
    documented = {(path, method) for path, ops in document["paths"].items() for method in ops}
    assert served == documented
    for schema in document["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)


def test_unknown_schema_name_exits_2_listing_the_names():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "a3fast", "schema", "nope"], capture_output=True, text=True)
    assert r.returncode == 2 and "place.request" in r.stderr
    r = subprocess.run([sys.executable, "-m", "a3fast", "schema", "place.request"], capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout) == load_schema("place.request")
    assert set(schema_names()) >= {f"{op}.{part}" for op in ("place", "verify") for part in ("request", "response")}


def test_many_clients_at_once(server):
    import asyncio

    async def run():
        async with httpx.AsyncClient(base_url=server.url) as client:
            async def one(k):
                if k % 4 == 0:
                    decl = {"v": "1.0", "agent": {"name": f"many-{k}", "namespace": "m"},
                            "capabilities": [{"name": "order.investigate", "version": 2}],
                            "clearances": ["orders.read"], "residency": ["eu"]}
                    return (await client.put(f"/v1/agents/many-{k}", json=decl)).status_code
                return (await client.post("/v1/place", json={"requirements": SECTION_10_TASK})).status_code
            return await asyncio.gather(*(one(k) for k in range(80)))
    assert set(asyncio.run(run())) == {200}
    assert server.client.post("/v1/verify", content=server.client.get("/v1/trace").content).json()["valid"]


def test_token_guards_everything_but_health(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    s = Server("--token-file", str(token), "--max-body", "2000")
    try:
        assert s.client.get("/healthz").status_code == 200
        assert s.client.get("/readyz").status_code == 200
        assert s.client.get("/v1/agents").status_code == 401
        assert s.client.get("/v1/agents", headers={"Authorization": "Bearer nope"}).status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        assert s.client.get("/v1/agents", headers=auth).status_code == 200
        assert s.client.post("/v1/place", headers=auth, content=b"x" * 5000).status_code == 413

        def chunks():                   # no Content-Length: the streamed size is what counts
            for _ in range(10):
                yield b"x" * 500
        assert s.client.post("/v1/place", headers=auth, content=chunks()).status_code == 413
    finally:
        assert s.stop() == 0


def test_openapi_documents_the_bodies_the_server_takes(server):
    document = server.client.get("/v1/openapi.json").json()
    paths = document["paths"]
    # PUT /v1/agents/{name} takes the declaration itself, as the server does
    schema = paths["/v1/agents/{name}"]["put"]["requestBody"]["content"]["application/json"]["schema"]
    assert "name" not in schema.get("properties", {}) and schema["type"] == "object"
    agent = SECTION_10_AGENTS[0]
    assert server.client.put(f"/v1/agents/{agent['agent']['name']}", json=agent).status_code == 200
    # the token-free routes say so; every other operation documents 401 and 503
    for path, ops in paths.items():
        for method, op in ops.items():
            if path in ("/healthz", "/readyz", "/metrics"):
                assert op["security"] == [] and "401" not in op["responses"]
            else:
                assert "401" in op["responses"], (path, method)
            assert "503" in op["responses"], (path, method)
            assert "content" in op["responses"]["200"], (path, method)
    assert "text/plain" in paths["/metrics"]["get"]["responses"]["200"]["content"]
    assert "application/x-ndjson" in paths["/v1/trace"]["get"]["responses"]["200"]["content"]


def test_405_allows_every_method_of_the_path(server):
    r = server.client.request("PATCH", "/v1/agents/order-analyst")
    assert r.status_code == 405
    assert set(r.headers["allow"].replace(" ", "").split(",")) >= {"GET", "PUT", "DELETE"}
    assert r.json()["problems"][0]["expected"] == "a method the route takes"


def test_readyz_while_the_cluster_is_first_listed_answers_as_its_openapi_document_says(server):
    # with --watch-k8s the 503 said status "syncing" and a "kubernetes" member the document did
    # not allow (schemathesis runs without --watch-k8s)
    document = server.client.get("/v1/openapi.json").json()
    schema = document["paths"]["/readyz"]["get"]["responses"]["503"]["content"]["application/json"]["schema"]
    validator = jsonschema.Draft202012Validator({**schema, "components": document["components"]})
    syncing = {"status": "syncing", "kubernetes": "the first list of the cluster is not applied yet"}
    assert list(validator.iter_errors(syncing)) == []
    assert list(validator.iter_errors({"status": "loading"})) == []

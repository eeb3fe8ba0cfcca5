"""The OpenAPI document of the HTTP API (served at /v1/openapi.json), assembled from the same JSON
Schemas the stdio protocol is documented by (`schemas/`), so the two cannot drift apart."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = ["openapi_document", "schema_names", "load_schema", "PATHS"]


def schema_names() -> list[str]:
    folder = resources.files(__package__) / "schemas"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict[str, Any]:
    """One schema by name (KeyError for an unknown name)."""
    if name not in schema_names():
        raise KeyError(name)
    return json.loads((resources.files(__package__) / "schemas" / f"{name}.json").read_text())


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json_body(name: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(name)}}}


def _answer(name: str | None, description: str, media: str = "application/json") -> dict[str, Any]:
    out: dict[str, Any] = {"description": description}
    if name is not None:
        out["content"] = {media: {"schema": _ref(name)}}
    return out


_ERRORS = {"400": _answer("error", "bad input: every problem, with its JSON path"),
           "401": _answer("error", "no valid bearer token (with --token-file)"),
           "413": _answer("error", "body larger than --max-body"),
           "500": _answer("error", "an internal error (logged)")}


def _op(summary: str, response: str | None, body: str | None = None, extra: dict | None = None,
        params: list | None = None, media: str = "application/json") -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {"200": _answer(response, "done", media), **_ERRORS,
                                                            **(extra or {})}}
    if body is not None:
        op["requestBody"] = _json_body(body)
    if params:
        op["parameters"] = params
    return op


def _param(name: str, where: str, schema: dict, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required or where == "path", "schema": schema}


_NAME = _param("name", "path", {"type": "string"})
_404 = {"404": _answer("error", "no such agent")}

#: path -> method -> operation: every route of the app (a test checks both directions)
PATHS: dict[str, dict[str, Any]] = {
    "/v1/agents/{name}": {
        "put": _op("Add or replace one agent; the body is its declaration, whose agent.name must be {name}",
                   "put_agent.response", "put_agent.request",
                   {"409": _answer("error", "the name is held by another namespace"),
                    "422": _answer("error", "agent.name differs from {name}")}, [_NAME]),
        "get": _op("One agent's declaration", "get_agent.response", None, _404, [_NAME]),
        "delete": _op("Remove one agent", "delete_agent.response", None, _404, [_NAME]),
    },
    "/v1/agents": {
        "get": _op("Agent names in order, paged", "list_agents.response", None, None,
                   [_param("after", "query", {"type": "string"}), _param("limit", "query", {"type": "integer"})]),
        "post": {**_op("Add or replace many agents, all or none; the body is JSON Lines of declarations "
                       "(a bad line is a 400 naming the line)", "put_agents.response",
                       extra={"409": _answer("error", "a name held by another namespace")}),
                 "requestBody": {"required": True, "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}},
    },
    "/v1/place": {
        "post": _op("Place one task: the trace records of the placement (200 for bound and unschedulable)",
                    "place.response", "place.request", {"422": _answer("error", "a route that would change a requirement")},
                    [_param("record", "query", {"enum": ["spec", "compact"]})]),
    },
    "/v1/outcomes": {"post": _op("Record a finished task's success", "outcome.response", "outcome.request", _404)},
    "/v1/sessions/{session}/{agent}": {
        "put": _op("The agent holds the session", "hold_session.response", None, _404,
                   [_param("session", "path", {"type": "string"}), _param("agent", "path", {"type": "string"})]),
        "delete": _op("The agent releases the session", "release_session.response", None, _404,
                      [_param("session", "path", {"type": "string"}), _param("agent", "path", {"type": "string"})]),
    },
    "/v1/trace": {"get": _op("The service's trace after a seq, as JSON Lines", None, None, None,
                             [_param("since", "query", {"type": "integer", "minimum": 0})])},
    "/v1/verify": {"post": {**_op("Verify a posted trace (§7): the `a3fast verify --json` object", "verify.response"),
                            "requestBody": {"required": True, "content": {
                                "application/x-ndjson": {"schema": {"type": "string"}},
                                "application/json": {"schema": {"type": "array", "items": _ref("record")}}}}}},
    "/v1/replay": {"post": _op("Place a trace's tasks again (posted, or `since` a seq of the service's own) on a copy of the "
                               "served fleet or on posted declarations: which decisions would change, and why",
                               "replay.response", "replay.request",
                               {"422": _answer("error", "a trace whose placements cannot be replayed"),
                                "503": _answer("error", "the replay ran past its time bound")})},
    "/v1/watch": {"get": _op("The watched Agent Cards (--watch-cards) and MCP servers (--watch-mcp): each one's agents, last fetch, last "
                             "change and last error", "watch.response")},
    "/ui": {"get": {"summary": "The live report of the service's trace (HTML; reloads itself as placements happen)",
                    "responses": {"200": {"description": "the report page, with an ETag"},
                                  "304": {"description": "the page the browser holds is current"},
                                  "401": _ERRORS["401"]}}},
    "/ui/data": {"get": {"summary": "The version of the trace /ui shows (its durable size in bytes) and the next seq",
                         "responses": {"200": {"description": "{version, next_seq}"}, "401": _ERRORS["401"]}}},
    "/v1/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}},
    "/healthz": {"get": {"summary": "The process is up (no token needed)", "responses": {"200": {"description": "up"}}}},
    "/readyz": {"get": {"summary": "The state is loaded (no token needed)",
                        "responses": {"200": {"description": "ready"}, "503": {"description": "still loading"}}}},
    "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "text exposition format"}}}},
    # with --tls-client-ca, /k8s/* is accepted on a verified TLS client certificate instead of the
    # token (kube-scheduler's Extender config has no header field); there is no bind verb
    "/k8s/filter": {"post": _op("Kubernetes scheduler extender: filter", "k8s.ExtenderFilterResult", "k8s.ExtenderArgs")},
    "/k8s/prioritize": {"post": _op("Kubernetes scheduler extender: prioritize", "k8s.HostPriorityList", "k8s.ExtenderArgs")},
}


@lru_cache(maxsize=None)
def openapi_document() -> dict[str, Any]:
    from .. import __version__

    schemas = {}
    for name in schema_names():
        schema = dict(load_schema(name))
        schema.pop("$schema", None)
        schema.pop("$id", None)
        schemas[name] = schema
    return {"openapi": "3.1.0",
            "info": {"title": "a3fast service", "version": __version__,
                     "description": "The A3 matcher as a long-running service (docs/service.md)."},
            "components": {"schemas": schemas,
                           "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
            "security": [{"bearer": []}],
            "paths": PATHS}

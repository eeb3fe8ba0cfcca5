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


def _answer(schema: dict | None, description: str, media: str = "application/json") -> dict[str, Any]:
    out: dict[str, Any] = {"description": description}
    if schema is not None:
        out["content"] = {media: {"schema": schema}}
    return out


def _error(description: str) -> dict[str, Any]:
    return _answer(_ref("error"), description)


_NDJSON = "application/x-ndjson"
_TEXT = {"type": "string"}


def _op(summary: str, response: dict[str, Any], *, body: dict[str, Any] | None = None,
        errors: dict[str, str] | None = None, params: list | None = None, open_route: bool = False,
        takes_input: bool = True) -> dict[str, Any]:
    """One operation with every status the server can answer it with: the route's own, then the
    ones every route shares (401 without the token, 431 for a request head over 16 KiB, 503 while
    loading or after a journal failure, 500 for an internal error), and 400/408/413 for a route that
    reads a body."""
    responses: dict[str, Any] = {"200": response}
    if takes_input or body is not None:
        responses["400"] = _error("bad input: every problem, with its JSON path")
    if not open_route:
        responses["401"] = _error("no valid bearer token (with --token-file); the answer says WWW-Authenticate: Bearer")
    if body is not None:
        responses["408"] = _error("the body did not arrive within --body-timeout")
        responses["413"] = _error("a body over the route's limit (docs/service.md, Limits)")
    for status, description in (errors or {}).items():
        responses[status] = _error(description)
    responses["431"] = _error("a request head (request line and headers) over 16 KiB; the connection is closed")
    responses["500"] = _error("an internal error (logged)")
    responses["503"] = _error("the state is still loading, or the journal could not be written")
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if body is not None:
        op["requestBody"] = {"required": True, "content": body}
    if params:
        op["parameters"] = params
    if open_route:
        op["security"] = []
    return op


def _placed(response: dict[str, Any]) -> dict[str, Any]:
    """A place answer, with the header that names a fleet snapshot its records carried."""
    return {**response, "headers": {"A3-Fleet": {
        "description": "when the answer's compact records carry a fleet snapshot's table: the token that "
                       "names it, for ?fleet= (docs/protocol.md, \"A snapshot the client holds\")",
        "schema": {"type": "string"}}}}


def _json(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(name)}}


def _done(name: str, description: str = "done") -> dict[str, Any]:
    return _answer(_ref(name), description)


def _param(name: str, where: str, schema: dict, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required or where == "path", "schema": schema}


_NAME = _param("name", "path", {"type": "string", "minLength": 1})
_SESSION = [_param("session", "path", {"type": "string", "minLength": 1, "pattern": "^[^/]+$"}),
            _param("agent", "path", {"type": "string", "minLength": 1})]
_404 = {"404": "no such agent"}
_DECLARATION = {"type": "object", "description": "An A3 §3 declaration (checked by the library's parser); "
                                                 "its agent.name must be {name}"}
_HEALTH = {"type": "object", "properties": {"status": {"const": "ok"}}, "required": ["status"]}
_READY = {"type": "object", "properties": {
    "status": {"enum": ["ready", "loading", "syncing"]},
    "kubernetes": {"type": "string", "description": "with --watch-k8s, while the first list of the cluster "
                                                      "is not applied yet (status syncing)"},
    "agents": {"type": "integer", "minimum": 0, "description": "only to a caller with the token (or with none configured)"},
    "next_seq": {"type": "integer", "minimum": 1, "description": "only to a caller with the token (or with none configured)"}},
    "required": ["status"]}
_UI_DATA = {"type": "object", "properties": {"version": {"type": "integer", "minimum": 0},
                                             "next_seq": {"type": "integer", "minimum": 1}},
            "required": ["version", "next_seq"]}

_K8S_SECURITY: list[dict[str, list[str]]] = [{"bearer": []}, {"clientCertificate": []}]

#: path -> method -> operation: every route of the app (a test checks both directions). Agent
#: names may hold "/": {name} and {agent} are the rest of the path (percent-encoding is decoded).
PATHS: dict[str, dict[str, Any]] = {
    "/v1/agents/{name}": {
        "put": _op("Add or replace one agent; the body is its declaration, whose agent.name must be {name}",
                   _done("put_agent.response"), body={"application/json": {"schema": _DECLARATION}},
                   errors={"409": "the name is held by another namespace",
                           "422": "agent.name differs from {name}"}, params=[_NAME]),
        "get": _op("One agent's declaration", _done("get_agent.response"), errors=_404, params=[_NAME]),
        "delete": _op("Remove one agent", _done("delete_agent.response"), errors=_404, params=[_NAME]),
    },
    "/v1/agents": {
        "get": _op("Agent names in order, paged", _done("list_agents.response"),
                   params=[_param("after", "query", {"type": "string"}),
                           _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 10_000})]),
        "post": _op("Add or replace many agents, all or none; the body is JSON Lines of declarations "
                    "(a bad line is a 400 naming the line)", _done("put_agents.response"),
                    body={_NDJSON: {"schema": _TEXT}}, errors={"409": "a name held by another namespace"}),
    },
    "/v1/place": {
        "post": _op("Place one task: the trace records of the placement (200 for bound and unschedulable); "
                    "or, for a JSON array of place requests (at most 1,000; more: 413), place each in order as one "
                    "at a time would, answered by an array of their answers (a refused request: its status and "
                    "problems, in its turn)",
                    _placed(_answer({"anyOf": [_ref("place.response"), _ref("place.batch.response")]},
                                    "the placement's records, or for an array the answers in order")),
                    body={"application/json": {"schema": {"anyOf": [_ref("place.request"),
                                                                    _ref("place.batch.request")]}}},
                    errors={"422": "a route that would change a requirement"},
                    params=[_param("record", "query", {"enum": ["spec", "compact", "compact-stream"]}),
                            {**_param("fleet", "query", {"type": "string", "pattern": "^[0-9]{1,20}-[0-9a-f]{16}$"}),
                             "description": "a fleet token an earlier answer's A3-Fleet header gave: the compact "
                                            "records refer to the record that carried that snapshot rather than "
                                            "carry it again (docs/protocol.md)"}]),
    },
    "/v1/outcomes": {"post": _op("Record a finished task's success", _done("outcome.response"),
                                 body=_json("outcome.request"),
                                 errors={**_404, "409": "the agent's outcomes of the kind are at the ceiling, MAX_OUTCOMES"})},
    "/v1/sessions/{session}/{agent}": {
        "put": _op("The agent holds the session", _done("hold_session.response"), errors=_404, params=_SESSION),
        "delete": _op("The agent releases the session", _done("release_session.response"), errors=_404,
                      params=_SESSION),
    },
    "/v1/trace": {"get": _op("The service's trace after a seq, as JSON Lines",
                             _answer(_TEXT, "the records, one per line", _NDJSON),
                             params=[_param("since", "query", {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}),
                                     _param("limit", "query", {"type": "integer", "minimum": 1,
                                                               "maximum": 100_000})])},
    "/v1/verify": {"post": _op("Verify a posted trace (§7): the `a3fast verify --json` object "
                               "(400 for a body that holds no record, as `a3fast verify` exits 2)",
                               _done("verify.response"),
                               body={_NDJSON: {"schema": _TEXT},
                                     "application/json": {"schema": {"type": "array", "items": _ref("record")}}})},
    "/v1/replay": {"post": _op("Place a trace's tasks again (posted, or `since` a seq of the service's own) on a copy of "
                               "the served fleet or on posted declarations: which decisions would change, and why",
                               _done("replay.response"), body=_json("replay.request"),
                               errors={"409": "posted declarations that hold one name in two namespaces",
                                       "422": "a trace whose placements cannot be replayed",
                                       "501": "a sharded fleet (replay runs on one fleet)",
                                       "503": "the replay ran past its time bound"})},
    "/v1/watch": {"get": _op("The watched Agent Cards (--watch-cards) and MCP servers (--watch-mcp): each one's "
                             "agents, last fetch, last change and last error", _done("watch.response"),
                             takes_input=False)},
    "/ui": {"get": _op("The live report of the service's trace (HTML; reloads itself as placements happen)",
                       _answer(_TEXT, "the report page, with an ETag", "text/html"), takes_input=False)},
    "/ui/data": {"get": _op("The version of the trace /ui shows (its durable size in bytes) and the next seq",
                            _answer(_UI_DATA, "{version, next_seq}"), takes_input=False)},
    "/v1/openapi.json": {"get": _op("This document", _answer({"type": "object"}, "OpenAPI 3.1"), takes_input=False)},
    "/healthz": {"get": _op("The process is up (no token needed)", _answer(_HEALTH, "up"), open_route=True,
                            takes_input=False)},
    "/readyz": {"get": _op("The state is loaded (no token needed; fleet size and next seq only with the token)",
                           _answer(_READY, "ready"), open_route=True, takes_input=False)},
    "/metrics": {"get": _op("Prometheus metrics (no token needed)",
                            _answer(_TEXT, "text exposition format", "text/plain"), open_route=True,
                            takes_input=False)},
    # with --tls-client-ca, /k8s/* is accepted on a verified TLS client certificate instead of the
    # token (kube-scheduler's Extender config has no header field); there is no bind verb
    "/k8s/filter": {"post": {**_op("Kubernetes scheduler extender: filter", _done("k8s.ExtenderFilterResult"),
                                   body=_json("k8s.ExtenderArgs")), "security": _K8S_SECURITY}},
    "/k8s/prioritize": {"post": {**_op("Kubernetes scheduler extender: prioritize", _done("k8s.HostPriorityList"),
                                       body=_json("k8s.ExtenderArgs")), "security": _K8S_SECURITY}},
}
PATHS["/ui"]["get"]["responses"]["304"] = {"description": "the page the browser holds is current"}
PATHS["/readyz"]["get"]["responses"]["503"] = _answer({"anyOf": [_READY, _ref("error")]},
                                                      "still loading, or the journal could not be written")


@lru_cache(maxsize=None)
def openapi_document() -> dict[str, Any]:
    from .._version import __version__

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
                           "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                               "clientCertificate": {
                                                   "type": "mutualTLS",
                                                   "description": "with --tls-client-ca: /k8s/* only"}}},
            "security": [{"bearer": []}],
            "paths": PATHS}

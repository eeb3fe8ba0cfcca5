"""`a3fast serve` under clients that send what they should not: every refusal a 4xx with the
library's problems, the documented headers on every answer, no connection held past its deadlines."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import jsonschema
import orjson
import pytest

from a3fast.service.openapi import load_schema
from service_process import SECTION_10_AGENTS, SECTION_10_TASK, Server, put_section_10_agents

pytest.importorskip("starlette")


@pytest.fixture(scope="module")
def server():
    s = Server("--header-timeout", "1", "--body-timeout", "1", "--max-request-body", "4096")
    put_section_10_agents(s.client)
    yield s
    assert s.stop() == 0


def problems(response: httpx.Response, status: int) -> list[dict]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"problems"} and body["problems"]
    for p in body["problems"]:
        assert {"path", "expected", "found"} <= set(p)
    return body["problems"]


def declaration(name: str) -> dict:
    return {"v": "1.0", "agent": {"name": name, "namespace": "support"},
            "capabilities": [{"name": "order.investigate", "version": 2}],
            "clearances": ["orders.read"], "residency": ["eu"]}


def test_route_without_adds_is_422_not_500(server):
    r = server.client.post("/v1/place", json={"requirements": SECTION_10_TASK, "route": {"name": "empty"}})
    assert "adds no requirements" in problems(r, 422)[0]["found"]


@pytest.mark.parametrize("adds, found", [({"model": 5}, "model must be added as an object, found 5"),
                                         ({"model": ["us-gov"]}, "model must be added as an object"),
                                         ({"capabilities": None}, "capabilities must be added as a list, found null"),
                                         ({"exclude": "x"}, "exclude must be added as a list"),
                                         ({"session": "s"}, "cannot add 'session'")])
def test_a_route_that_adds_what_no_route_may_is_422_not_500(server, adds, found):
    r = server.client.post("/v1/place", json={"requirements": SECTION_10_TASK, "route": {"name": "r", "adds": adds}})
    assert found in problems(r, 422)[0]["found"]


def test_a_batch_element_nested_past_any_readers_depth_refuses_the_body_never_500(server):
    before = server.client.get("/v1/trace").content
    assert problems(server.client.post("/v1/place", content=b"[" * 977 + b"]" * 977), 400)
    deep = b"[" * 980 + b"]" * 980
    body = b"[" + orjson.dumps({"requirements": SECTION_10_TASK}) + b"," + deep + b"]"
    assert problems(server.client.post("/v1/place", content=body), 400)
    assert server.client.get("/v1/trace").content == before          # nothing was placed


@pytest.mark.parametrize("method, path", [("GET", "/healthz/"), ("GET", "/v1/trace/"), ("POST", "/v1/place/"),
                                          ("GET", "/v1/openapi.json/"), ("PUT", "/v1/sessions/s1")])
def test_a_path_that_names_no_route_is_404_never_a_redirect(server, method, path):
    r = server.client.request(method, path, headers={"Host": "elsewhere.example"})
    assert problems(r, 404)[0]["found"].endswith(path) and "location" not in r.headers


@pytest.mark.parametrize("value", ["", "a\nb", "x" * 1025])
def test_a_session_or_kind_no_record_could_carry_is_400_naming_it(server, value):
    before = server.client.get("/v1/trace").content
    place = {"requirements": SECTION_10_TASK, "session": value}
    assert problems(server.client.post("/v1/place", json=place), 400)[0]["path"] == "$.session"
    assert problems(server.client.put(f"/v1/sessions/{'x' * 1025 if len(value) > 1024 else 'a%0Ab'}/order-analyst"),
                    400)[0]["path"] == "$.session"
    outcome = {"agent": "order-analyst", "success": True, "kind": value}
    assert problems(server.client.post("/v1/outcomes", json=outcome), 400)[0]["path"] == "$.kind"
    assert server.client.get("/v1/trace").content == before


def test_an_empty_record_form_is_400_not_taken_as_spec(server):
    # "" names no form, in the body or the query (where `?record=` is a blank value); only a
    # missing one means spec
    before = server.client.get("/v1/trace").content
    place = {"requirements": SECTION_10_TASK}
    assert problems(server.client.post("/v1/place?record=", json=place), 400)[0]["path"] == "$.record"
    assert problems(server.client.post("/v1/place", json={**place, "record": ""}), 400)[0]["path"] == "$.record"
    batch = server.client.post("/v1/place?record=", json=[place])
    assert batch.status_code == 200 and batch.json()[0]["status"] == 400
    assert server.client.get("/v1/trace").content == before
    assert server.client.post("/v1/place", json=place).status_code == 200


def test_requirements_are_refused_at_their_paths_in_the_request(server):
    bad = {**SECTION_10_TASK, "capabilities": [{"name": "order.investigate", "version": True}]}
    alone = problems(server.client.post("/v1/place", json={"requirements": bad}), 400)
    assert [p["path"] for p in alone] == ["$.requirements.capabilities[0].version"]
    [element] = server.client.post("/v1/place", json=[{"requirements": bad}]).json()
    assert element["status"] == 400 and element["problems"] == alone
    # what a route makes of valid requirements is the route's to answer for
    routed = {"requirements": SECTION_10_TASK, "route": {"name": "r", "adds": {"clearances": [5]}}}
    [found] = problems(server.client.post("/v1/place", json=routed), 400)
    assert found["path"] == "$.route.adds" and "clearances[1]" in found["found"]
    outcome = {"agent": "order-analyst", "success": True, "requirements": {"v": "2.0"}}
    assert [p["path"] for p in problems(server.client.post("/v1/outcomes", json=outcome), 400)] == ["$.requirements.v"]


@pytest.mark.parametrize("query", ["limit=²", "limit=٣", "limit=" + "9" * 5000, "limit=-1", "limit=1.5"])
def test_agent_page_limit_that_is_not_ascii_digits_is_400(server, query):
    assert problems(server.client.get(f"/v1/agents?{query}"), 400)[0]["path"] == "$.limit"


@pytest.mark.parametrize("since", ["²", "١٢", "9" * 5000, "-3", ""])
def test_trace_since_that_is_not_ascii_digits_is_400(server, since):
    assert problems(server.client.get("/v1/trace", params={"since": since}), 400)[0]["path"] == "$.since"


def test_names_with_a_slash_are_read_replaced_and_deleted(server):
    name = "team/eu/order-analyst"
    assert server.client.post("/v1/agents", content=orjson.dumps(declaration(name))).status_code == 200
    assert server.client.get(f"/v1/agents/{name}").json()["declaration"]["agent"]["name"] == name
    assert server.client.get("/v1/agents/team%2Feu%2Forder-analyst").status_code == 200   # percent-encoded too
    # a name with a line break is "no such agent", not "no such route"
    assert problems(server.client.get("/v1/agents/a%0Ab"), 404)[0]["path"] == "$.name"
    assert server.client.put(f"/v1/agents/{name}", json=declaration(name)).json() == {"name": name, "created": False}
    assert server.client.put(f"/v1/sessions/s1/{name}").json()["held"] is True
    assert server.client.delete(f"/v1/sessions/s1/{name}").json()["held"] is False
    assert server.client.delete(f"/v1/agents/{name}").json() == {"name": name, "deleted": True}
    problems(server.client.get(f"/v1/agents/{name}"), 404)


def test_unknown_route_and_method_answer_the_error_json(server):
    assert "GET /v2/nothing" in problems(server.client.get("/v2/nothing"), 404)[0]["found"]
    problems(server.client.get("/v1/agents/"), 404)
    r = server.client.delete("/v1/place")
    problems(r, 405)
    assert "POST" in r.headers["allow"]


def test_every_answer_says_nosniff(server):
    for r in (server.client.get("/healthz"), server.client.get("/v2/nothing"), server.client.get("/metrics"),
              server.client.post("/v1/place", json={"requirements": SECTION_10_TASK}),
              server.client.post("/v1/place", content=b"{")):
        assert r.headers["x-content-type-options"] == "nosniff"


def test_verify_of_an_empty_body_is_no_records_not_valid(server):
    assert "no records" in problems(server.client.post("/v1/verify", content=b""), 400)[0]["found"]
    assert "no records" in problems(server.client.post("/v1/verify", content=b"{}\n"), 400)[0]["found"]


def test_one_document_routes_have_the_small_body_limit(server):
    big = orjson.dumps({"requirements": SECTION_10_TASK, "pad": "x" * 5000})
    assert problems(server.client.post("/v1/place", content=big), 413)[0]["expected"] == "a body of at most 4096 bytes"
    problems(server.client.put("/v1/agents/x", content=big), 413)
    # the trace route keeps --max-body: the same size is read and answered
    assert problems(server.client.post("/v1/verify", content=b" " * 5000), 400)


def _raw(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed the connection within `seconds`, and what it sent before."""
    sock.settimeout(seconds)
    got = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return True, got
            got += chunk
    except (socket.timeout, TimeoutError):
        return False, got
    except ConnectionResetError:
        return True, got


@pytest.mark.slow  # waits out the head timeout, twice
def test_half_sent_head_is_cut_off_after_the_header_timeout(server):
    silent, partial = _raw(server.url), _raw(server.url)
    partial.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    started = time.monotonic()
    assert _closed_within(partial, 5)[0]
    assert _closed_within(silent, 5)[0]
    assert time.monotonic() - started < 4
    # a keep-alive connection that starts a second head and stalls is cut off too
    kept = _raw(server.url)
    kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"200 OK" in kept.recv(4096)
    kept.sendall(b"GET /healthz HTTP/1.1\r\n")
    assert _closed_within(kept, 5)[0]


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_a_request_head_past_16_kib_is_refused_431_and_its_bytes_are_not_kept(server):
    # a head of 15 KiB is read and answered; past 16 KiB the answer is 431 with the problems, and a
    # head that never ends is refused there rather than kept growing (httptools has no bound of its own)
    ok = _raw(server.url)
    ok.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 15_000 + b"\r\n\r\n")
    assert b"200 OK" in ok.recv(4096)
    whole = _raw(server.url)
    whole.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 24_000 + b"\r\n\r\n")
    closed, answer = _closed_within(whole, 5)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert closed and head.startswith(b"HTTP/1.1 431 ")
    assert orjson.loads(body)["problems"][0]["expected"].startswith("a request head (request line and headers) of at most 16384")
    # and every operation of the OpenAPI document lists that answer
    document = server.client.get("/v1/openapi.json").json()
    assert all("431" in operation["responses"] for path in document["paths"].values()
               for operation in path.values() if isinstance(operation, dict) and "responses" in operation)
    before = _rss_kib(server.proc.pid)
    endless = _raw(server.url)
    endless.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ")
    sent = 0
    try:
        while sent < 64 << 20:                 # 64 MiB of one header, if the server kept reading
            endless.sendall(b"a" * (1 << 20))
            sent += 1 << 20
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert sent < 64 << 20
    assert _rss_kib(server.proc.pid) - before < 32 << 10
    # and the server answers the next client
    assert server.client.get("/healthz").status_code == 200


def test_a_body_answered_before_it_arrived_is_not_taken_for_a_head(server):
    # a 404 (or 401, 413) is answered from the head; the body then still arrives, in writes of
    # its own, and the connection goes on to the next request
    import http.client

    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        for _ in range(3):
            connection.request("POST", "/v1/no-such-route", body=b"x" * 300_000)
            answer = connection.getresponse()
            answer.read()
            assert answer.status == 404
            connection.request("GET", "/healthz")
            answer = connection.getresponse()
            answer.read()
            assert answer.status == 200
    finally:
        connection.close()


@pytest.mark.parametrize("request_bytes", [
    b"\x16\x03\x01 not http\r\n\r\n",
    b"POST /v1/place HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST /v1/place HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nnot-hex\r\n",
])
def test_bytes_that_are_no_http_request_are_refused_with_the_problems(server, request_bytes):
    # refused by the HTTP parser before any route: still a 400 with the problems, not text
    sock = _raw(server.url)
    sock.sendall(request_bytes)
    closed, answer = _closed_within(sock, 5)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert closed and head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head
    assert orjson.loads(body)["problems"][0]["expected"] == "an HTTP/1.1 request"


def test_half_sent_body_is_answered_408_after_the_body_timeout(server):
    sock = _raw(server.url)
    sock.sendall(b"POST /v1/place HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"requirements\":")
    sock.settimeout(5)
    got = b""
    while b"}]}" not in got:               # the whole answer, however the server then keeps the connection
        chunk = sock.recv(4096)
        assert chunk, got
        got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), got
    assert orjson.loads(body)["problems"][0]["expected"] == "a whole body within 1 s"


@pytest.mark.slow  # a server of its own, and the head timeout
def test_connections_past_the_limit_are_closed_and_idle_ones_freed():
    s = Server("--max-connections", "4", "--header-timeout", "1")
    try:
        s.client.close()
        idle = [_raw(s.url) for _ in range(4)]
        time.sleep(0.2)
        extra = _raw(s.url)
        assert _closed_within(extra, 2)[0]
        for sock in idle:          # cut off by the head timeout: the service is reachable again
            assert _closed_within(sock, 5)[0]
        assert httpx.get(s.url + "/readyz", timeout=5).status_code == 200
    finally:
        assert s.stop() == 0


def test_401_says_www_authenticate_and_open_routes_say_no_more(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    s = Server("--token-file", str(token))
    try:
        r = s.client.get("/v1/agents")
        problems(r, 401)
        assert r.headers["www-authenticate"] == "Bearer"
        assert s.client.get("/metrics").status_code == 200          # open, as docs/service.md says
        assert s.client.get("/readyz").json() == {"status": "ready"}   # no fleet size or seq without the token
        full = s.client.get("/readyz", headers={"Authorization": "Bearer s3cret"}).json()
        assert full["status"] == "ready" and full["agents"] == 0 and full["next_seq"] == 1
    finally:
        assert s.stop() == 0


def stdio(lines: list[bytes], *args: str) -> tuple[list[dict], str]:
    r = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--stdio", *args],
                       input=b"".join(line + b"\n" for line in lines), capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [orjson.loads(x) for x in r.stdout.splitlines()], r.stderr.decode()


def test_stdio_route_without_adds_is_422_with_no_traceback():
    out, err = stdio([orjson.dumps({"op": "put_agents", "declarations": SECTION_10_AGENTS}),
                      orjson.dumps({"op": "place", "id": 2, "requirements": SECTION_10_TASK, "route": {"name": "r"}})])
    assert out[1]["ok"] is False and out[1]["status"] == 422
    assert "Traceback" not in err and err == ""


def test_stdio_trace_limit_keeps_the_last_record_and_refuses_minus_one():
    place = orjson.dumps({"op": "place", "requirements": SECTION_10_TASK})
    out, _ = stdio([orjson.dumps({"op": "put_agents", "declarations": SECTION_10_AGENTS}), place, place,
                    orjson.dumps({"op": "trace", "id": "all"}),
                    orjson.dumps({"op": "trace", "id": "two", "limit": 2}),
                    orjson.dumps({"op": "trace", "id": "minus", "limit": -1}),
                    orjson.dumps({"op": "trace", "id": "zero", "limit": 0})])
    by_id = {r.get("id"): r for r in out}
    assert [r["seq"] for r in by_id["all"]["records"]] == [1, 2, 3, 4, 5, 6]
    assert [r["seq"] for r in by_id["two"]["records"]] == [1, 2]
    for rid in ("minus", "zero"):
        assert by_id[rid]["ok"] is False and by_id[rid]["status"] == 400
        assert by_id[rid]["problems"][0]["path"] == "$.limit"


def test_stdio_answers_the_same_problems_as_http_for_the_same_error(server):
    request = {"requirements": SECTION_10_TASK, "route": {"name": "r"}}
    over_http = server.client.post("/v1/place", json=request).json()
    out, _ = stdio([orjson.dumps({"op": "put_agents", "declarations": SECTION_10_AGENTS}),
                    orjson.dumps({"op": "place", **request})])
    assert out[1]["problems"] == over_http["problems"]


@pytest.mark.parametrize("node", [{"metadata": {"name": {"an": "object"}}}, {"metadata": {"namespace": "x"}},
                                  {"metadata": {"name": "n", "annotations": {"a3.dev/declaration": {}}}},
                                  {"metadata": {"name": "n", "annotations": {"other": 3}}},
                                  {"metadata": "not an object"}])
def test_extender_args_typed_as_kubernetes_types_them(server, node):
    """Nodes kube-scheduler could not have sent are a 400 naming the node, never echoed back into
    an answer that breaks its own schema (the pod takes no part: its nodes would pass through)."""
    args = {"Pod": {"metadata": {"name": "p", "uid": "u"}}, "Nodes": {"items": [node]}}
    r = server.client.post("/k8s/filter", json=args)
    assert problems(r, 400)[0]["path"].startswith("$.Nodes.items[0]"), r.text
    r = server.client.post("/k8s/prioritize", json=args)       # echoes only names: typed, or refused
    if r.status_code == 200:
        jsonschema.validate(r.json(), load_schema("k8s.HostPriorityList"))
    else:
        assert problems(r, 400)[0]["path"].startswith("$.Nodes.items[0]"), r.text


@pytest.mark.parametrize("since", [-1, 2**63, 10**19, 2**64 - 1])
def test_a_since_past_a_seqs_range_is_refused_alike_over_http_and_stdio(server, since):
    over_http = problems(server.client.get("/v1/trace", params={"since": str(since)}), 400)
    out, _ = stdio([orjson.dumps({"op": "trace", "since": since, "limit": 1})])
    assert out[0]["ok"] is False and out[0]["status"] == 400
    assert out[0]["problems"] == over_http == [{"path": "$.since", "expected": "a seq (an integer from 0 to 2^63-1)",
                                                "found": str(since)}]


def test_the_last_seq_is_a_since_both_ways_take(server):
    assert server.client.get("/v1/trace", params={"since": str(2**63 - 1)}).text == ""
    out, _ = stdio([orjson.dumps({"op": "trace", "since": 2**63 - 1})])
    assert out[0]["ok"] is True and out[0]["records"] == []


@pytest.mark.parametrize("field", ["since", "until"])
def test_a_replays_range_is_held_to_a_seqs_range(server, field):
    body = {"since": 0, field: 2**63}
    [found] = problems(server.client.post("/v1/replay", json=body), 400)
    assert found == {"path": f"$.{field}", "expected": "a seq (an integer from 0 to 2^63-1)", "found": str(2**63)}


def test_a_client_that_pipelines_and_hangs_up_unread_is_no_internal_error(tmp_path):
    # uvicorn marks only the newest request of a pipeline disconnected: an older one still
    # answering wrote to the closed connection, logged as an unexpected error with its traceback
    own = Server("--state", str(tmp_path / "state"))
    try:
        put_section_10_agents(own.client)
        for _ in range(20):
            own.client.post("/v1/place", json={"requirements": SECTION_10_TASK}).raise_for_status()
        sock = _raw(own.url)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        data = b"GET /v1/trace HTTP/1.1\r\nHost: x\r\n\r\n" * 20_000
        sent, started = 0, time.monotonic()
        while sent < len(data) and time.monotonic() - started < 3:
            try:
                sent += sock.send(data[sent:sent + 65536])
            except BlockingIOError:
                time.sleep(0.05)
        time.sleep(1)
        sock.close()
        time.sleep(1)
        assert own.client.get("/healthz").status_code == 200
    finally:
        assert own.stop() == 0
    err = own.proc.stderr.read().decode()
    assert "unexpected error" not in err and "Traceback" not in err, err[-2000:]


def test_a_refusal_lists_at_most_a_hundred_problems_and_echoes_no_value_whole(server):
    # a 0.9 MB body of 300,000 bad lines was answered with 113 MB of problems, one list per line,
    # made in one piece on the event loop; a 60,000-character value came back whole
    from a3fast.service.problems import MAX_PROBLEM_TEXT, MAX_PROBLEMS

    r = server.client.post("/v1/agents", content=b"{}\n" * 3000, headers={"content-type": "application/x-ndjson"})
    listed = problems(r, 400)
    assert len(listed) == MAX_PROBLEMS + 1 and len(r.content) < 40_000
    assert listed[-1]["expected"] == f"a request with at most {MAX_PROBLEMS} problems listed"
    assert listed[-1]["found"].endswith("more problems, not listed")
    r = server.client.post("/v1/replay", json={"fail_on": "x" * 3000 + ">1"})
    found = problems(r, 400)[0]["found"]
    assert len(found) < MAX_PROBLEM_TEXT + 100 and found.endswith("more characters)"), found[-80:]


def test_the_problems_of_many_documents_are_bounded_once_in_line_order():
    # each line's problems were bounded on their own as they were gathered, so a "more problems"
    # row (with no line) could sort to the top and the answer was bounded again around it
    from a3fast.service.operations import Operations
    from a3fast.service.problems import MAX_PROBLEMS, ServiceError

    bad = {"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "clearances": [],
           "capabilities": [{"name": "Not An Identifier", "version": -1}] * 40}
    with pytest.raises(ServiceError) as answer:
        Operations.prepare_agents({"declarations": [bad] * 12}, list(range(1, 13)))
    listed = answer.value.problems
    assert len(listed) == MAX_PROBLEMS + 1
    lines = [p["line"] for p in listed[:-1]]
    assert lines == sorted(lines) and lines[0] == 1
    assert "line" not in listed[-1] and listed[-1]["found"].endswith("more problems, not listed")

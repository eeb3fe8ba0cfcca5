"""A start that cannot hang: whatever a loader raises while `a3fast serve` reads its state, the
server stops with exit 2 and a message naming the file, never a traceback and never a server left
answering 503 "loading"."""
from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from a3fast import snapshot
from service_process import SECTION_10_AGENTS, Server

pytest.importorskip("starlette")


def _snapshot_named_by_checkpoint(state) -> "object":
    files = sorted(p for p in state.iterdir() if p.name.endswith(".a3snap"))
    assert len(files) == 1, [p.name for p in state.iterdir()]
    return files[0]


def test_any_loader_failure_stops_the_start_with_exit_2_naming_the_file(tmp_path):
    state = tmp_path / "state"
    first = Server("--state", str(state))
    for agent in SECTION_10_AGENTS:
        assert first.client.put(f"/v1/agents/{agent['agent']['name']}", json=agent).status_code in (200, 201)
    assert first.stop() == 0
    path = _snapshot_named_by_checkpoint(state)
    header, sections = snapshot.decode(path.read_bytes(), str(path))
    header.pop("section_starts")
    # a whole, checksummed snapshot of the right content whose predicate rows are not the mapping
    # a fleet's are: the fleet's reader meets a shape it has no check for
    header["field_rows"] = [list(entries) for entries in header["field_rows"].values()]
    snapshot.write(path, header, {name: bytes(view) for name, view in sections.items()})
    try:
        run = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--port", "0", "--state", str(state)],
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the server kept running (answering 503 'loading') after its loader failed")
    assert run.returncode == 2, run.stderr
    assert str(path) in run.stderr and "cannot start" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_start_that_fails_stops_even_with_standard_error_gone(tmp_path):
    # its reader closed (a supervisor's log pipe broken): the failure's lines are lost, and the
    # server still stops with exit 2, not left answering 503 "loading"
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(b'{"v": "a3/1.0", "agent": {"name": "x"}\n')
    proc = subprocess.Popen([sys.executable, "-m", "a3fast", "serve", "--port", "0", "--fleet", str(fleet)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stderr.close()
    try:
        assert proc.wait(timeout=60) == 2
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        pytest.fail("the server kept running after its load failed with standard error closed")
    finally:
        proc.stdout.close()


def test_a_service_serves_on_and_stops_cleanly_with_standard_output_gone(tmp_path):
    # a supervisor that read the listening line and closed its end: the ready and stopped lines
    # are lost, the service serves, and a stop closes its state cleanly with exit 0
    server = Server("--state", str(tmp_path / "state"), ready=False)
    server.proc.stdout.close()
    server.wait_ready()
    agent = SECTION_10_AGENTS[0]
    assert server.client.put(f"/v1/agents/{agent['agent']['name']}", json=agent).status_code in (200, 201)
    assert server.stop() == 0
    stderr = server.stderr()
    assert "Traceback" not in stderr and "Error" not in stderr, stderr
    again = Server("--state", str(tmp_path / "state"))
    try:
        assert again.client.get(f"/v1/agents/{agent['agent']['name']}").status_code == 200
    finally:
        assert again.stop() == 0


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_rule_serving_is_announced_only_once_the_service_takes_work(tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in SECTION_10_AGENTS))
    server = Server("--fleet", str(fleet), ready=False)
    ready_line = server.proc.stdout.readline().decode()
    # by the time the service says it serves, it does
    assert ready_line.startswith("a3fast: ready (2 agents); serving on ") and ready_line.split()[-1] == server.url
    assert server.client.get("/readyz").status_code == 200
    assert server.stop() == 0
    rest = server.proc.stdout.read().decode()
    assert _lines(rest) == ["a3fast: stopped"]
    assert all(line.startswith("a3fast: ") for line in _lines(server.stderr()))


def test_rule_a_start_that_fails_never_says_it_serves_and_prefixes_every_line(tmp_path):
    # declarations (so the file's kind passes) of which the second is broken: the load fails once
    # the server has begun loading, and the problem spans several lines
    broken = dict(SECTION_10_AGENTS[1], capabilities="not a list")
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(orjson.dumps(SECTION_10_AGENTS[0]) + b"\n" + orjson.dumps(broken) + b"\n")
    run = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--port", "0", "--fleet", str(fleet)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "serving on" not in run.stdout and "cannot start" in run.stderr
    assert all(line.startswith("a3fast: ") for line in _lines(run.stdout) + _lines(run.stderr)), run.stderr


def test_the_access_log_writes_a_line_per_answered_request(tmp_path):
    server = Server("--access-log")
    assert server.client.get("/v1/agents").status_code == 200
    assert server.client.get("/no/such/route").status_code == 404
    assert server.stop() == 0
    lines = [line for line in _lines(server.stderr()) if '"' in line]
    assert any(line.startswith("a3fast: 127.0.0.1:") and '"GET /v1/agents" 200 ' in line and line.endswith(" ms")
               for line in lines), lines
    assert any('"GET /no/such/route" 404 ' in line for line in lines), lines


def test_answers_given_before_the_app_are_logged_and_timed_too():
    # a request line httptools refuses (400) and a head past 16 KiB (431) are answered by the
    # protocol, below the app: no access line, and no count in a3fast_request_seconds
    import socket

    server = Server("--access-log")
    host, port = server.url.removeprefix("http://").split(":")

    def raw(data: bytes) -> bytes:
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(data)
            return conn.recv(65536)

    assert raw(b"GET /v1/agents/a\x01 HTTP/1.1\r\nhost: x\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw(b"GET /healthz HTTP/1.1\r\nx-big: " + b"a" * 20_000 + b"\r\n\r\n").startswith(b"HTTP/1.1 431 ")
    # methods are counted by name for the service's own, "other" for any a client makes up
    for method in ("PROPFIND", "PURGE"):
        raw(f"{method} /healthz HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    metrics = server.client.get("/metrics").text
    assert server.stop() == 0
    lines = [line for line in _lines(server.stderr()) if '"- -"' in line]
    assert any(line.startswith("a3fast: 127.0.0.1:") and '"- -" 400 ' in line for line in lines), lines
    assert any('"- -" 431 ' in line for line in lines), lines
    assert 'a3fast_request_seconds_count{method="other",route="unmatched"}' in metrics
    assert "PROPFIND" not in metrics and "PURGE" not in metrics


def test_an_access_log_line_keeps_its_quoted_field_whatever_the_path_holds():
    # a raw `"` in a request's path (httptools passes it) closed the quoted field early
    from a3fast.service.access_log import access_line

    line = access_line(("127.0.0.1", 5), "GET", '/v1/agents/x"y\\z\x1b', 404, 84, 0.0002)
    assert line == 'a3fast: 127.0.0.1:5 "GET /v1/agents/x\\"y\\\\z\\x1b" 404 84 B 0.20 ms'


def test_without_the_access_log_nothing_is_written_per_request():
    server = Server()
    assert server.client.get("/v1/agents").status_code == 200
    assert server.stop() == 0
    assert "/v1/agents" not in server.stderr()


@pytest.mark.parametrize("extra, warned", [((), True), (("--token-file", "TOKEN"), False)])
def test_rule_a_non_loopback_address_without_authentication_is_warned_of(tmp_path, extra, warned):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    extra = tuple(str(token) if a == "TOKEN" else a for a in extra)
    # 192.0.2.1 (TEST-NET-1) is not this machine's: the bind fails after the warning, so nothing
    # listens beyond loopback while the test runs
    run = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--host", "192.0.2.1", "--port", "0", *extra],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "cannot listen on 192.0.2.1" in run.stderr, run.stderr
    assert ("a3fast: warning: listening on 192.0.2.1 without authentication" in run.stderr) is warned


def test_a_loopback_address_is_not_warned_of():
    server = Server()
    assert server.stop() == 0
    assert "warning" not in server.stderr()

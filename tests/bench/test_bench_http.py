"""The HTTP bench row: both subjects answer every request the client sends on the same server
stack, the fixed-rate phase sends what was due, and the figures are the ones the report prints
beside the targets (no timing is asserted)."""
from __future__ import annotations

import asyncio

import orjson
import pytest

from a3fast.bench.asgi_echo import echo_app
from a3fast.bench.http import FIXED_RATE, bench_http
from a3fast.bench.http_client import NotOk, closed_loop, fixed_rate, request_bytes, run
from a3fast.bench.processes import ServedProcess, cpu_of
from a3fast.bench.report import render, targets
from a3fast.bench.suite import EXTRA_BENCHES, HTTP_TITLE, BenchConfig, BenchReport, machine_info


def test_http_bench_measures_both_subjects_and_the_fixed_rate_and_prints_the_rows():
    figures = bench_http(rounds=2, requests=150, seconds=5.0, connections=4, fixed_seconds=0.2)
    assert (figures["agents"], figures["rounds"], figures["connections"]) == (1000, 2, 4)
    assert figures["echo_answered"] == figures["place_answered"] == figures["held_answered"] == 150
    # a client holding the fleet's snapshot is not sent its names again
    assert figures["held_answer_bytes"] < figures["place_answer_bytes"] / 2 and figures["held_ratio"] > 0
    assert figures["batch_answered"] == 150 // figures["batch_size"]       # requests of batch_size placements
    assert figures["batch_per_s"] > 0 and figures["batch_ratio"] > 0
    assert figures["stream_answered"] == figures["batch_answered"] and figures["stream_ratio"] > 0
    # a response's answers carry the fleet's names once with compact-stream, every time with compact
    assert figures["stream_answer_bytes"] < figures["batch_answer_bytes"] / 2
    for key in ("echo_per_s", "place_per_s", "service_path_us", "fixed_p50_ms", "fixed_p99_ms"):
        assert figures[key] > 0, key
    # CPU time of a process is counted in 10 ms ticks: a short phase may show none
    for key in ("echo_server_cpu_us", "place_server_cpu_us", "fixed_server_cpu_us"):
        assert figures[key] >= 0, key
    assert figures["ratio"] == figures["place_per_s"] / figures["echo_per_s"]
    assert figures["fixed_due"] == int(FIXED_RATE * 0.2) and 0 < figures["fixed_answered"] <= figures["fixed_due"]
    assert figures["fixed_p50_ms"] <= figures["fixed_p99_ms"]
    assert 0 < figures["echo_fixed_answered"] <= figures["fixed_due"]
    assert 0 < figures["echo_fixed_p50_ms"] <= figures["echo_fixed_p99_ms"]
    # the echo answers the request body; a placement answers its records, the fleet's names among them
    assert figures["echo_answer_bytes"] < figures["place_answer_bytes"]

    report = BenchReport(BenchConfig(sizes=(), quick=True), "2026-01-01T00:00:00", machine_info(),
                         extras=[(HTTP_TITLE, figures)])
    rows = {text: (measured, met) for text, measured, met in targets(report)}
    floor = rows["HTTP placements ≥ 50% of a raw ASGI echo on the same server stack, same run"]
    assert f"{figures['ratio']:.0%}" in floor[0] and floor[1] == (figures["ratio"] >= 0.5)
    held = rows["HTTP placements, one a request sending back the fleet token (the fleet's names not sent again), "
                "≥ 50% of the echo"]
    assert f"{figures['held_ratio']:.0%}" in held[0] and held[1] == (figures["held_ratio"] >= 0.5)
    assert f"{figures['held_answer_bytes']:,} bytes an answer" in held[0]
    batch = rows[f"HTTP placements, {figures['batch_size']} a request (a JSON array), ≥ 50% of the echo's requests/s"]
    assert f"{figures['batch_ratio']:.0%}" in batch[0] and batch[1] == (figures["batch_ratio"] >= 0.5)
    stream = rows[f"HTTP placements, {figures['batch_size']} a request with compact-stream records (a snapshot "
                  f"once a response), ≥ 50% of the echo's requests/s"]
    assert f"{figures['stream_ratio']:.0%}" in stream[0] and stream[1] == (figures["stream_ratio"] >= 0.5)
    fixed = rows["HTTP at a fixed 1,000 requests/s, --fsync never: p99 ≤ 5 ms"]
    assert f"{figures['fixed_answered']:,} of {figures['fixed_due']:,} answered" in fixed[0] and "load average" in fixed[0]
    assert f"the echo at the same rate, p99 {figures['echo_fixed_p99_ms']:.3g} ms" in fixed[0]
    text = " ".join(render(report).split())    # lines wrapped at 100 columns, read as one
    assert "HTTP placements measured" in text and "goal ≥ 50% of a raw ASGI echo" in text and HTTP_TITLE in text


def test_the_http_row_is_one_of_the_benches_a_run_measures():
    assert (HTTP_TITLE, bench_http) in EXTRA_BENCHES


def test_the_echo_app_answers_the_body_back_as_json():
    sent: list[dict] = []
    body = orjson.dumps({"requirements": {"v": "1.0", "capabilities": [{"name": "a.b", "version": 1}]}})
    chunks = [{"type": "http.request", "body": body[:7], "more_body": True},
              {"type": "http.request", "body": body[7:], "more_body": False}]

    async def receive():
        return chunks.pop(0)

    async def send(message):
        sent.append(message)
    asyncio.run(echo_app({"type": "http", "method": "POST", "path": "/"}, receive, send))
    start, answer = sent
    assert start["status"] == 200 and (b"content-type", b"application/json") in start["headers"]
    assert orjson.loads(answer["body"]) == orjson.loads(body)
    assert (b"content-length", str(len(answer["body"])).encode()) in start["headers"]


async def _server(answers: list[bytes], split: bool):
    """A server on 127.0.0.1 that answers each request with the next of `answers` (one byte a write
    when `split`: the client must find an answer's end across reads)."""
    async def handle(reader, writer):
        for answer in answers:
            await reader.readuntil(b"\r\n\r\n")
            if split:
                for k in range(len(answer)):
                    writer.write(answer[k:k + 1])
                    await writer.drain()
            else:
                writer.write(answer)
        await reader.read()
        writer.close()
    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _answer(status: str, body: bytes) -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


@pytest.mark.parametrize("split", [False, True])
def test_the_client_reads_each_answer_by_its_content_length(split):
    async def go():
        server = await _server([_answer("200 OK", b'{"a":' + b"1" * 300 + b"}")] * 5, split)
        port = server.sockets[0].getsockname()[1]
        try:
            return await closed_loop(port, [request_bytes("/", b"{}")], 5, 10.0, connections=1)
        finally:
            server.close()
    measured = run(go())
    assert measured.answered == 5 and len(measured.latencies_s) == 5 and measured.per_s > 0


def test_an_answer_other_than_200_under_load_is_an_error():
    async def go():
        server = await _server([_answer("200 OK", b"{}"), _answer("503 Service Unavailable", b"{}")], False)
        port = server.sockets[0].getsockname()[1]
        try:
            await closed_loop(port, [request_bytes("/", b"{}")], 5, 10.0, connections=1)
        finally:
            server.close()
    with pytest.raises(NotOk, match="503"):
        run(go())


def test_a_request_open_at_the_fixed_rate_deadline_is_missed_not_awaited():
    async def go():
        # answers the first request only; the rest stay open past the grace period
        server = await _server([_answer("200 OK", b"{}")], False)
        port = server.sockets[0].getsockname()[1]
        try:
            return await fixed_rate(port, [request_bytes("/", b"{}")], 100, 0.05, connections=1, grace_s=0.2)
        finally:
            server.close()
    measured = run(go())
    assert measured.due == 5 and len(measured.latencies_s) == 1 and measured.missed == 4


def test_a_process_that_does_not_print_its_banner_is_an_error_naming_it_and_saying_why():
    with pytest.raises(RuntimeError, match="a3fast.bench.no_such_module did not start.*No module named"):
        ServedProcess("a3fast.bench.no_such_module", banner="a3fast echo serving on ", start_timeout=30)


def test_cpu_of_reads_a_live_process_counters():
    import os

    assert cpu_of(os.getpid()) >= 0

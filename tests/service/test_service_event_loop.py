"""The event loop is never held by one request: /healthz keeps answering while the largest body the
service accepts (a 64 MiB trace posted to /v1/verify) is received, parsed and verified."""
from __future__ import annotations

import statistics
import subprocess
import sys
import time

import httpx
import orjson
import pytest

from service_process import SECTION_10_TASK, Server, healthz_latencies_while, put_section_10_agents

pytest.importorskip("starlette")
pytestmark = pytest.mark.slow   # a 64 MiB trace posted and verified: about 10 s

#: The target is 20 ms (docs/service.md, "Limits"); the bound leaves room for a machine shared
#: with other work, while a loop held by the request (seconds) still fails it.
P99_BOUND_S = 0.1
BODY = 64 * 1024 * 1024 - 4096


def _trace(records: list[dict], size: int) -> bytes:
    """A valid trace of about `size` bytes: the placement's records again and again, renumbered."""
    bodies = [orjson.dumps({k: v for k, v in r.items() if k != "seq"})[1:] for r in records]
    out, total, seq = [], 0, 1
    while total < size - 2048:
        for body in bodies:
            line = b'{"seq":%d,' % seq + body
            out.append(line)
            total += len(line) + 1
            seq += 1
    return b"\n".join(out) + b"\n"


POSTER = """
import sys, httpx
data = open(sys.argv[2], "rb").read()
r = httpx.post(sys.argv[1] + "/v1/verify", content=data, timeout=120)
print(r.status_code, r.json().get("valid"), flush=True)
"""


def _p99(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.99) - 1)]


def _healthz_latencies(url: str, count: int) -> list[float]:
    out = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(count):
            started = time.perf_counter()
            assert client.get("/healthz").status_code == 200
            out.append(time.perf_counter() - started)
            time.sleep(0.01)
    return out


def test_healthz_answers_within_bound_while_a_64_mib_body_is_handled(tmp_path):
    s = Server()
    try:
        put_section_10_agents(s.client)
        records = s.client.post("/v1/place", json={"requirements": SECTION_10_TASK}).json()["records"]
        body = tmp_path / "trace.jsonl"
        body.write_bytes(_trace(records, BODY))
        assert BODY - 4096 < body.stat().st_size <= BODY
        idle = _healthz_latencies(s.url, 100)
        poster = subprocess.Popen([sys.executable, "-c", POSTER, s.url, str(body)], stdout=subprocess.PIPE, text=True)
        latencies = healthz_latencies_while(s.url, poster, seconds=120, pause=0.01)
        out = poster.communicate(timeout=60)[0]
        assert out.split() == ["200", "True"], out
        assert len(latencies) >= 50, "the post ended before healthz could be measured"
        p99 = _p99(latencies)
        print(f"healthz idle: p50 {statistics.median(idle) * 1000:.1f} ms p99 {_p99(idle) * 1000:.1f} ms; "
              f"during a {BODY / 2**20:.0f} MiB verify: n={len(latencies)} p50 {statistics.median(latencies) * 1000:.1f} ms "
              f"p99 {p99 * 1000:.1f} ms max {max(latencies) * 1000:.1f} ms")
        assert p99 <= P99_BOUND_S
    finally:
        assert s.stop() == 0

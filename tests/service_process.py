"""Real `a3fast serve` processes for the service tests: started with --port 0, the URL read from the
line they print, stopped by their own pid."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

SECTION_10_AGENTS = [
    {"v": "1.0", "agent": {"name": "order-analyst", "namespace": "support"},
     "capabilities": [{"name": "order.investigate", "version": 2}],
     "clearances": ["orders.read", "customers.read"], "residency": ["eu"]},
    {"v": "1.0", "agent": {"name": "summariser", "namespace": "support"},
     "capabilities": [{"name": "case.summarise", "version": 1}],
     "clearances": ["orders.read"], "residency": ["eu"]},
]
SECTION_10_TASK = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}],
                   "clearances": ["orders.read"], "residency": "eu"}


def put_section_10_agents(client) -> None:
    """Every §10 agent PUT to a served fleet through `client` (an httpx client of a Server)."""
    for agent in SECTION_10_AGENTS:
        assert client.put(f"/v1/agents/{agent['agent']['name']}", json=agent).status_code == 200


def _limit_file_size(size: int):
    """A child process's limit on the size of any file it writes (RLIMIT_FSIZE): a write past it
    fails with EFBIG, as a write to a full disk fails with ENOSPC (Python ignores SIGXFSZ)."""
    def limit() -> None:
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return limit


def healthz_latencies_while(url: str, process: subprocess.Popen, *, seconds: float, pause: float) -> list[float]:
    """How long each `GET /healthz` took, asked every `pause` s while `process` (a client holding
    the service busy) runs, for at most `seconds`; each must answer 200."""
    latencies = []
    with httpx.Client(base_url=url, timeout=30) as client:
        deadline = time.monotonic() + seconds
        while process.poll() is None and time.monotonic() < deadline:
            started = time.perf_counter()
            assert client.get("/healthz").status_code == 200
            latencies.append(time.perf_counter() - started)
            time.sleep(pause)
    return latencies


class Server:
    def __init__(self, *args: str, ready: bool = True, timeout: float = 30.0,
                 file_size_limit: int | None = None, stdin: int | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "a3fast", "serve", "--port", "0", *args],
                                     stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     preexec_fn=_limit_file_size(file_size_limit) if file_size_limit else None)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("a3fast: loading; listening on "):
            self.proc.wait(timeout=10)
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read().decode()}")
        self.url = line.split()[-1]
        self.client = httpx.Client(base_url=self.url, timeout=10.0)
        if ready:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.client.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read().decode()}")
            time.sleep(0.02)
        raise TimeoutError("server not ready")

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.client.close()

    def stop(self) -> int:
        """SIGTERM, and the exit code once the process has stopped. One that has not stopped within
        30 s is killed (never left running past its test), and the test fails with its stderr."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"the server did not stop within 30 s of SIGTERM; the end of its stderr:\n"
                                 f"{self.stderr()[-3000:]}") from None
        finally:
            self.client.close()
        return code

    def stderr(self) -> str:
        return self.proc.stderr.read().decode()

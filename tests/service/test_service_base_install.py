"""`a3fast serve` on the base install (no 'serve' extra): --stdio works, HTTP exits 2 naming the
extra. The HTTP stack is made unimportable in a real CLI process (`sys.modules[name] = None` makes
`import name` raise ModuleNotFoundError, as on an install without it)."""
from __future__ import annotations

import subprocess
import sys

import orjson

from service_process import SECTION_10_AGENTS, SECTION_10_TASK

#: What the 'serve' extra brings (and what it pulls in).
SERVE_EXTRA = ("starlette", "uvicorn", "httptools", "uvloop", "prometheus_client", "anyio", "httpx", "h11")

RUN_WITHOUT = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None
from a3fast.cli import main
main(prog_name="a3fast")
"""


def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN_WITHOUT.format(blocked=SERVE_EXTRA), *args],
                          input=stdin, capture_output=True, timeout=60)


def test_stdio_needs_no_http_stack(tmp_path):
    requests = [{"op": "put_agents", "id": 1, "declarations": SECTION_10_AGENTS},
                {"op": "place", "id": 2, "requirements": SECTION_10_TASK},
                {"op": "place", "id": 3, "requirements": SECTION_10_TASK, "route": {"name": "r"}}]
    for args in ((), ("--state", str(tmp_path / "state"))):
        r = cli("serve", "--stdio", *args, stdin=b"".join(orjson.dumps(q) + b"\n" for q in requests))
        assert r.returncode == 0, r.stderr.decode()
        out = [orjson.loads(line) for line in r.stdout.splitlines()]
        assert [o["ok"] for o in out] == [True, True, False] and out[2]["status"] == 422
        assert out[1]["records"][2]["kind"] == "task.bound"
        assert r.stderr == b""


def test_http_without_the_serve_extra_exits_2_naming_it():
    r = cli("serve", "--port", "0")
    assert r.returncode == 2
    err = r.stderr.decode()
    assert "pip install 'a3fast[serve]'" in err and "Traceback" not in err

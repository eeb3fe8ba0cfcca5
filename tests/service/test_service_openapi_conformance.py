"""The served OpenAPI document is true to the server: schemathesis generates requests for every
operation of /v1/openapi.json (the examples, coverage and fuzzing phases) against a real server
and checks every answer — no 5xx, every status documented, every body of its documented media type
and schema, 401 answers, 405 `Allow` headers.

Two checks are left out on purpose: `positive_data_acceptance` and `negative_data_rejection` ask
that the request schemas say exactly what the server accepts, but declarations, requirements and
traces are checked by the library's parser (§3, §4, §7), which the schemas only name as objects
(docs/protocol.md, "Schemas"): a schema-valid declaration may still be refused 400 with problems.

A3FAST_SCHEMATHESIS_EXAMPLES sets the examples per operation (default: a run of about a minute on
this project's machine); docs/service.md records a run of more than 10,000 requests.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from service_process import Server

pytest.importorskip("schemathesis")
pytest.importorskip("starlette")
pytestmark = pytest.mark.slow   # about a minute

EXAMPLES = int(os.environ.get("A3FAST_SCHEMATHESIS_EXAMPLES", "20"))
TESTS = Path(__file__).resolve().parents[1]  # where schemathesis_hooks.py lives
LEFT_OUT = ("positive_data_acceptance", "negative_data_rejection")


def _answered(metrics: str) -> int:
    """Requests the server answered, from its own latency histogram."""
    return int(sum(float(m) for m in re.findall(r"^a3fast_request_seconds_count\{.*\} (\S+)$", metrics, re.M)))


def test_every_operation_answers_as_its_openapi_document_says(tmp_path):
    token = tmp_path / "token"
    token.write_text("conformance\n")
    s = Server("--state", str(tmp_path / "state"), "--token-file", str(token), "--max-body", str(1 << 20))
    try:
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
               "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
        run = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "run", f"{s.url}/v1/openapi.json",
             "-H", "Authorization: Bearer conformance", "--checks", "all",
             "--exclude-checks", ",".join(LEFT_OUT), "--phases", "examples,coverage,fuzzing",
             "--max-examples", str(EXAMPLES), "--seed", "28", "--no-color", "--request-timeout", "30",
             "--suppress-health-check", "all", "--warnings", "off"],
            capture_output=True, text=True, timeout=1800, env=env, cwd=tmp_path)
        answered = _answered(s.client.get("/metrics").text)
        summary = run.stdout[run.stdout.find("SUMMARY"):]
        print(f"schemathesis: {answered} requests answered; {summary.splitlines()[-1] if summary else ''}")
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
        assert answered >= 10 * EXAMPLES      # every operation was reached, many times
    finally:
        code = s.stop()
        log = s.stderr()
    assert "unexpected error" not in log, log[-4000:]
    assert code == 0

"""`a3fast serve --stdio`: one JSON request per line in, one JSON response per line out.

`{"op": ..., "id"?: any, ...fields}` -> `{"id", "ok": true, ...result}` or
`{"id", "ok": false, "status": 4xx, "problems": [...]}`. The operations are the HTTP API's
(`operations.Operations`); requests are answered in order, each after its change is durable.
"""
from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any, BinaryIO

import orjson

from ..errors import SchemaError
from .operations import OPS, Operations
from .problems import ServiceError, from_library, parse_json, problem

__all__ = ["serve_stdio", "answer"]

log = logging.getLogger("a3fast.serve")


async def answer(ops: Operations, line: bytes) -> bytes:
    """The response line (without newline) to one request line."""
    rid: Any = None
    try:
        try:
            request = parse_json(line)
        except SchemaError as exc:
            raise from_library(exc) from None
        if not isinstance(request, dict):
            raise ServiceError(400, [problem("$", 'an object {"op", ...}', "another value")])
        rid = request.get("id")
        op = request.get("op")
        method = OPS.get(op) if isinstance(op, str) else None
        if method is None:
            raise ServiceError(400, [problem("$.op", "one of " + ", ".join(OPS), repr(op)[:60])])
        result = await getattr(ops, method)(request)
        return orjson.dumps({"id": rid, "ok": True, **result})
    except ServiceError as exc:
        return orjson.dumps({"id": rid, "ok": False, "status": exc.status, "problems": exc.problems})
    except Exception:
        log.exception("unexpected error answering a stdio request")
        return orjson.dumps({"id": rid, "ok": False, "status": 500,
                             "problems": [problem("$", "a request the service can answer",
                                                  "an internal error (logged)")]})


async def serve_stdio(ops: Operations, stdin: BinaryIO, stdout: BinaryIO, max_line: int) -> None:
    """Answer request lines until end of input. Lines longer than `max_line` are answered 413."""
    loop = asyncio.get_running_loop()
    reader = stdin
    while True:
        line = await loop.run_in_executor(None, reader.readline, max_line + 1)
        if not line:
            return
        if len(line) > max_line and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):   # drop the rest of the oversized line
                line = await loop.run_in_executor(None, reader.readline, 1 << 20)
            out = orjson.dumps({"id": None, "ok": False, "status": 413, "problems": [
                problem("$", f"a request line of at most {max_line} bytes", "more")]})
        elif not line.strip():
            continue
        else:
            out = await answer(ops, line)
        stdout.write(out + b"\n")
        stdout.flush()

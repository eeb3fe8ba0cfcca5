"""Schemathesis hooks for the OpenAPI conformance run (tests/service/test_service_openapi_conformance.py):
JSON Lines bodies (POST /v1/agents, /v1/verify) are sent as the generated text, as UTF-8 (lone
surrogates kept as bytes a client could send)."""
from __future__ import annotations

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8", "surrogatepass")

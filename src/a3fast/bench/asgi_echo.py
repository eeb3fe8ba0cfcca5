"""The floor of an HTTP placement: a raw ASGI app that reads the request body, decodes it and answers
it back as JSON, served by the same server stack as `a3fast serve` (`service.server.uvicorn_server`:
uvicorn, its guarded protocol and limits, the same defaults).

`python -m a3fast.bench.asgi_echo` listens on 127.0.0.1, a free port, and prints
"a3fast echo serving on http://127.0.0.1:PORT" once it listens, as `a3fast serve` prints its URL;
SIGTERM stops it.
"""
from __future__ import annotations

import signal

import orjson

__all__ = ["echo_app", "main"]

JSON_HEADERS = [(b"content-type", b"application/json")]


async def echo_app(scope, receive, send) -> None:
    """Every HTTP request answered 200 with its body decoded and encoded again as JSON."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body, more = b"", True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        more = message.get("more_body", False)
    payload = orjson.dumps(orjson.loads(body) if body else None)
    await send({"type": "http.response.start", "status": 200,
                "headers": [*JSON_HEADERS, (b"content-length", b"%d" % len(payload))]})
    await send({"type": "http.response.body", "body": payload})


def main() -> int:
    from ..service.config import ServiceConfig
    from ..service.server import listening_socket, uvicorn_server

    config = ServiceConfig(host="127.0.0.1", port=0)
    sock = listening_socket(config.host, config.port)
    server = uvicorn_server(echo_app, config)
    host, port = sock.getsockname()[:2]
    print(f"a3fast echo serving on http://{host}:{port}", flush=True)
    # uvicorn raises a SIGTERM again after its graceful stop; this handler makes that a clean exit
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

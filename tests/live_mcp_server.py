"""MCP servers built with the official `mcp` SDK, for the live-import tests.

    python tests/live_mcp_server.py MODE stdio
    python tests/live_mcp_server.py MODE http PORTFILE     (binds 127.0.0.1:0, writes the port)
    python tests/live_mcp_server.py MODE https PORTFILE CERT KEY    (the same over TLS)

MODE is one of:
- `tools`   an `MCPServer` (the SDK's FastMCP, renamed in mcp 2) with three tools and annotations;
- `paged`   a low-level `Server` listing 5 tools two per page (cursors "2", "4");
- `cycle`   a low-level server whose second page's nextCursor is the first page's again;
- `broken`  a low-level server that answers an error for the second page;
- `slow`    a low-level server that sleeps before answering tools/list;
- `file`    a low-level server that reads its tool names (a JSON list) from the file named by
            $A3FAST_TEST_TOOLS at every tools/list, so a test changes its tools while it runs.
"""
from __future__ import annotations

import json
import os
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer

PAGED = [f"tool_{i}" for i in range(5)]


def tools_server() -> MCPServer:
    server = MCPServer("live-tools-mcp-server")

    @server.tool(annotations=types.ToolAnnotations(readOnlyHint=True, openWorldHint=False))
    def get_order(order_id: str) -> str:
        """Read one order."""
        return order_id

    @server.tool(annotations=types.ToolAnnotations(readOnlyHint=False, destructiveHint=False))
    def create_ticket(title: str) -> str:
        """Open a support ticket."""
        return title

    @server.tool()
    def delete_customer(customer_id: str) -> str:
        """Remove a customer (no annotations: MCP's defaults apply)."""
        return customer_id

    return server


def low_level(mode: str) -> Server:
    async def list_tools(ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if mode == "file":
            with open(os.environ["A3FAST_TEST_TOOLS"]) as listed:
                names = json.load(listed)
            return types.ListToolsResult(tools=[types.Tool(name=n, input_schema={"type": "object"}) for n in names])
        cursor = params.cursor if params is not None else None
        start = int(cursor) if cursor else 0
        if mode == "slow":
            await anyio.sleep(30)
        if mode == "broken" and start > 0:
            raise RuntimeError("backend unavailable while listing page 2")
        names = PAGED[start:start + 2]
        following = start + 2 if start + 2 < len(PAGED) else None
        if mode == "cycle" and start == 2:
            following = 0  # back to the first page
        tools = [types.Tool(name=name, input_schema={"type": "object"}) for name in names]
        return types.ListToolsResult(tools=tools,
                                     next_cursor=str(following) if following is not None else None)

    return Server(f"{mode}-mcp-server", on_list_tools=list_tools)


def main(argv: list[str]) -> None:
    mode, transport = argv[0], argv[1]
    server = tools_server() if mode == "tools" else low_level(mode)
    lowlevel = server._lowlevel_server if isinstance(server, MCPServer) else server
    if transport == "stdio":
        from mcp.server.stdio import stdio_server

        async def run() -> None:
            async with stdio_server() as (read, write):
                await lowlevel.run(read, write, lowlevel.create_initialization_options())

        anyio.run(run)
        return
    import socket

    import uvicorn

    app = server.streamable_http_app(json_response=True, stateless_http=True)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    tls = {"ssl_certfile": argv[3], "ssl_keyfile": argv[4]} if transport == "https" else {}
    config = uvicorn.Config(app, log_level="warning", lifespan="on", **tls)
    uv = uvicorn.Server(config)
    with open(argv[2], "w") as out:
        out.write(str(port))
    uv.run(sockets=[sock])


if __name__ == "__main__":
    main(sys.argv[1:])

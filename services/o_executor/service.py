"""The executor process: agent runs (StartRun commands) and the runs/messages projection."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from o_contracts import subjects
from o_contracts.base import Reply
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.models import ChatMessage
from o_executor.loop import AgentRun
from o_executor.projections import runs
from o_runtime.commands import CommandConsumer
from o_runtime.projector import Projector
from o_runtime.service import Service


class ExecutorService(Service):
    name = "executor"

    _agent_locks: defaultdict[str, asyncio.Lock]

    async def setup(self) -> None:
        self._agent_locks = defaultdict(asyncio.Lock)
        Projector(runs, self.pool, self.eventlog).subscribe(self.broker)
        CommandConsumer(
            self.eventlog,
            "executor",
            subjects.EXECUTOR_COMMANDS,
            {StartRun: self.start_run},
            # A run can take minutes; the consumer heartbeats while it works.
            ack_wait=60.0,
            concurrency=8,
        ).subscribe(self.broker)

    async def start_run(self, envelope: Envelope[Any]) -> Reply:
        # One run per agent at a time in this process (fair, FIFO); runs of
        # different agents proceed in parallel. Across replicas: see issue 3.
        async with self._agent_locks[envelope.data.agent_id]:
            return await AgentRun(self, envelope).execute()

    async def load_agent(self, agent_id: str) -> dict[str, Any] | None:
        # The agent registry is the gateway's projection; the executor only reads it.
        row = await self.pool.fetchrow(
            "SELECT id, name, system, agent_type, llm_config, tools, tool_rules, tool_ids,"
            " encrypted_secrets FROM agents WHERE id = $1",
            agent_id,
        )
        if row is None:
            return None
        agent = dict(row)
        # The agent's user tools by name, from the gateway's tools projection:
        # their source travels to the sandbox in each RunTool command.
        tools = await self.pool.fetch(
            "SELECT id, name, source_code, json_schema, return_char_limit, idempotent"
            " FROM tools WHERE id = ANY($1)",
            list(agent["tool_ids"]),
        )
        agent["user_tools"] = {t["name"]: dict(t) for t in tools}
        return agent

    async def load_history(self, agent_id: str) -> list[ChatMessage]:
        rows = await self.pool.fetch(
            "SELECT body FROM messages WHERE agent_id = $1 ORDER BY seq", agent_id
        )
        return [ChatMessage.model_validate(r["body"]) for r in rows]

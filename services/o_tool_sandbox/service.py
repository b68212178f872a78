"""The tool-sandbox process.

It runs as its own process with its own consumer so the deployment shape is
real from day one; running user tools in isolation is issue 5 and not built
yet: every command it receives is dead-lettered with that reason.
"""

from __future__ import annotations

from o_contracts import subjects
from o_runtime.commands import CommandConsumer
from o_runtime.service import Service


class ToolSandboxService(Service):
    name = "tool_sandbox"
    needs_database = False

    async def setup(self) -> None:
        CommandConsumer(self.eventlog, "tool_sandbox", subjects.SANDBOX_COMMANDS, {}).subscribe(
            self.broker
        )

"""The evolution process (sleep-time compute, shadow evaluation, promotion).

Runs as its own process and consumer so the deployment shape is real; its
behaviour is a later issue and not built yet: commands it receives are
dead-lettered with that reason.
"""

from __future__ import annotations

from o_contracts import subjects
from o_runtime.commands import CommandConsumer
from o_runtime.service import Service


class EvolutionService(Service):
    name = "evolution"

    async def setup(self) -> None:
        self.consume(CommandConsumer(self.eventlog, "evolution", subjects.EVOLUTION_COMMANDS, {}))

"""The evolution process: it decides when an agent thinks on its own.

Today that is sleep-time compute (docs/sleeptime.md): an event reactor follows
the end of every run and counts the turns of agents that manage a sleep-time
group, starting their companions' background runs when a turn is due. Shadow
evaluation and promotion (issue 14) will live here too; commands addressed to
the service are dead-lettered until then.
"""

from __future__ import annotations

from o_contracts import subjects
from o_contracts.events import RunCompleted
from o_evolution.settings import EvolutionSettings
from o_evolution.turns import SleeptimeTurns
from o_runtime.commands import CommandConsumer
from o_runtime.env import Env
from o_runtime.reactor import EventReactor
from o_runtime.service import Service


class EvolutionService(Service):
    name = "evolution"

    def configure(self, env: Env) -> None:
        self.config = EvolutionSettings.from_env(env)

    async def setup(self) -> None:
        self.consume(CommandConsumer(self.eventlog, "evolution", subjects.EVOLUTION_COMMANDS, {}))
        turns = SleeptimeTurns(self.eventlog, self.pool, self.reads, self.config.budget)
        self.reactors.append(
            EventReactor(
                self.eventlog,
                "evolution-turns",
                subjects.AGENT_AND_CONVERSATION_EVENTS,
                {RunCompleted: turns.on_runs_completed},
            )
        )

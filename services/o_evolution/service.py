"""The evolution process: it decides when an agent thinks on its own, and how it changes.

- Sleep-time compute (docs/sleeptime.md): an event reactor follows the end of every
  run and counts the turns of agents that manage a sleep-time group, starting their
  companions' background runs when a turn is due.
- Self-evolution (docs/evolution.md): commands on `o.cmd.evolution.<agent_id>` propose
  patches to an agent, evaluate them in the shadow, and promote or roll back versions;
  every decision is hash-chained on the agent's evolution subject (projection
  "evolution", hosted here). The same run ends drive canary rollouts' analysis.
- Scheduled runs (docs/schedules.md): the scheduler (o_schedules) fires agents' schedules
  and keeps their projection "schedules" here.
"""

from __future__ import annotations

import os

from o_contracts import subjects
from o_contracts.events import RunCompleted, SleeptimeTurnCounted
from o_contracts.evolution_commands import (
    AbortRollout,
    ConfigureEvolution,
    EvaluateProposal,
    PromoteProposal,
    ProposeChange,
    ReviewProposal,
    RollBackVersion,
    RunEvolutionTool,
    StartRollout,
)
from o_evolution.agent_tools import AgentTools
from o_evolution.checkpoints import Checkpoints
from o_evolution.commands import EvolutionCommands
from o_evolution.evaluation import Evaluation
from o_evolution.projection import evolution
from o_evolution.rollouts import Rollouts
from o_evolution.run_ends import RunEnds
from o_evolution.scheduled import ScheduledProposals
from o_evolution.settings import MAX_PENDING_COMMANDS, EvolutionSettings
from o_evolution.turns import SleeptimeTurns
from o_runtime.commands import CommandConsumer
from o_runtime.env import Env
from o_runtime.reactor import EventReactor
from o_runtime.service import Service
from o_schedules.component import Scheduler


class EvolutionService(Service):
    name = "evolution"

    def configure(self, env: Env) -> None:
        self.config = EvolutionSettings.from_env(env)
        # Shadow evaluations are this process's heavy work: on a shared machine the
        # scheduler gives users' runs (executor, gateway, memory) the CPU first.
        if self.config.nice:
            os.nice(self.config.nice)

    async def setup(self) -> None:
        self.project(evolution)
        self.scheduler = Scheduler(self)
        self.scheduler.setup()
        cmds = EvolutionCommands(self, self.config)
        # Each agent's snapshot folds as of its last evaluation, for the next evaluation
        # and canary analysis to read on from (checkpoints.py).
        checkpoints = Checkpoints(self.pool, self.eventlog)
        evaluation = Evaluation(cmds, checkpoints=checkpoints)
        rollouts = Rollouts(cmds, checkpoints=checkpoints)
        agent_tools = AgentTools(cmds)
        self.consume(
            CommandConsumer(
                self.eventlog,
                "evolution",
                subjects.EVOLUTION_COMMANDS,
                {
                    ConfigureEvolution: cmds.configure,
                    ProposeChange: cmds.propose,
                    EvaluateProposal: evaluation.evaluate,
                    ReviewProposal: cmds.review,
                    PromoteProposal: cmds.promote,
                    StartRollout: rollouts.start,
                    AbortRollout: rollouts.abort,
                    RollBackVersion: cmds.roll_back,
                    RunEvolutionTool: agent_tools.run,
                },
                # An evaluation asks a model several times per case: it heartbeats
                # while it works, and a dead replica's command comes back in 30 s.
                ack_wait=30.0,
                concurrency=4,
                max_ack_pending=MAX_PENDING_COMMANDS,
            )
        )
        proposals = ScheduledProposals(self.eventlog, self.pool, self.config.enabled)
        turns = SleeptimeTurns(self.eventlog, self.pool, self.reads, self.config.budget)
        self.reactors.append(
            EventReactor(
                self.eventlog,
                "evolution-turns",
                subjects.AGENT_AND_CONVERSATION_EVENTS,
                {
                    # (One consumer of run ends for sleep-time turns and canaries: a
                    # consumer per reaction would cost every run another delivery.)
                    RunCompleted: RunEnds(self.pool, turns, rollouts).on_runs_completed,
                    SleeptimeTurnCounted: proposals.on_turns_counted,
                    **self.scheduler.agent_reactions(),
                },
            )
        )

    async def started(self) -> None:
        await self.scheduler.start()

    async def stopping(self) -> None:
        await self.scheduler.stop()

"""One run in progress: its inputs, its dependencies, its state, and the ids it derives."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from o_contracts.base import Event
from o_contracts.commands import StartRun
from o_contracts.ids import derived_id
from o_executor.run.agent import AgentConfig, ModelChoice
from o_executor.run.deps import RunDeps
from o_executor.run.state import RunInputs, RunState


@dataclass
class Run:
    inputs: RunInputs
    deps: RunDeps
    state: RunState = field(default_factory=RunState)

    @property
    def cmd(self) -> StartRun:
        return self.inputs.cmd

    @property
    def run_id(self) -> str:
        return self.inputs.cmd.run_id

    @property
    def agent_id(self) -> str:
        return self.inputs.cmd.agent_id

    @property
    def agent(self) -> AgentConfig:
        return self.inputs.agent

    @cached_property
    def model(self) -> ModelChoice:
        """The agent's model, or the one this request overrides it with (and its settings
        with the request's, a conversation's model_settings, over them)."""
        if self.cmd.override_model:
            return ModelChoice.override(self.cmd.override_model, self.cmd.override_settings)
        if self.cmd.override_settings:
            return ModelChoice.of({**self.agent.llm_config, **self.cmd.override_settings})
        return self.agent.model

    # Ids derive from the run's, so a resumed run derives the same ones (and a
    # repeated append is the same fact).
    def message_id(self, step: int, *parts: str) -> str:
        return derived_id("message", self.run_id, str(step), *parts)

    def step_id(self, step: int | str) -> str:
        return derived_id("step", self.run_id, str(step))

    async def record(self, event: Event, key: str) -> int:
        return await self.deps.record(event, key)

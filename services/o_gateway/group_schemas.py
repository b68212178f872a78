"""Request bodies of `/v1/groups/` (Letta's GroupCreate and GroupUpdate).

`manager_config` is a union told apart by `manager_type`: an unknown type is a
422 that names it, and a sleep-time frequency below 1 is a 422.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from o_gateway.schemas import Body, Description, Ids, Name

Frequency = Annotated[int, Field(ge=1, le=1_000_000)]
Turns = Annotated[int, Field(ge=1, le=1_000)]


class RoundRobinConfig(Body):
    manager_type: Literal["round_robin"]
    max_turns: Turns | None = None


class SupervisorConfig(Body):
    manager_type: Literal["supervisor"]
    manager_agent_id: Name | None = None


class DynamicConfig(Body):
    manager_type: Literal["dynamic"]
    manager_agent_id: Name | None = None
    termination_token: Name | None = None
    max_turns: Turns | None = None


class SleeptimeConfig(Body):
    manager_type: Literal["sleeptime"]
    manager_agent_id: Name | None = None
    sleeptime_agent_frequency: Frequency | None = None


ManagerConfig = Annotated[
    RoundRobinConfig | SupervisorConfig | DynamicConfig | SleeptimeConfig,
    Field(discriminator="manager_type"),
]


class CreateGroupBody(Body):
    agent_ids: Ids
    description: Description = ""
    manager_config: ManagerConfig = Field(
        default_factory=lambda: RoundRobinConfig(manager_type="round_robin")
    )
    hidden: bool | None = None
    project_id: Name | None = None
    shared_block_ids: Ids = Field(default_factory=list)


class UpdateGroupBody(Body):
    agent_ids: Ids | None = None
    description: Description | None = None
    manager_config: ManagerConfig | None = None
    project_id: Name | None = None

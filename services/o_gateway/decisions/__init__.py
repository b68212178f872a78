"""Agent decisions apart from HTTP: typed commands, pure decisions, and their appending.

- `commands.py`: one dataclass per decision (CreateAgent, UpdateAgent, AttachBlock ...).
- `agent.py`: the agent's state a decision reads, read on a checked connection.
- `decide.py`: pure functions, state and command to the event (or None, or Refused).
- `checks.py`: checks of given values, and Refused.
- `append.py`: read, decide, append, with the expected subject sequence.

Routes (o_gateway/routes/) parse a request into a command (o_gateway.agent_requests),
call `create_agent` or `change_agent`, and render the agent.
"""

from o_gateway.decisions.append import change_agent, create_agent
from o_gateway.decisions.checks import Refused
from o_gateway.decisions.commands import (
    AgentChange,
    AgentChanges,
    AttachBlock,
    AttachTool,
    BuiltinTool,
    CreateAgent,
    DeleteAgent,
    DetachBlock,
    DetachTool,
    NewBlock,
    SetToolApproval,
    UpdateAgent,
    UserTool,
)

__all__ = [
    "AgentChange",
    "AgentChanges",
    "AttachBlock",
    "AttachTool",
    "BuiltinTool",
    "CreateAgent",
    "DeleteAgent",
    "DetachBlock",
    "DetachTool",
    "NewBlock",
    "Refused",
    "SetToolApproval",
    "UpdateAgent",
    "UserTool",
    "change_agent",
    "create_agent",
]

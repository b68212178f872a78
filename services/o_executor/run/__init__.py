"""The agent loop, as a package with explicit dependencies (issue 11).

`run_agent(inputs, deps)` runs one run to completion: `inputs` is what it
reads before starting (state.py), `deps` everything it reads or changes in the
world (deps.py). The live executor (o_executor/live) and the shadow runner
(o_executor/shadow) are two implementations of those dependencies around the
same loop.

- context.py: one run in progress (inputs, deps, state, derived ids)
- loop.py: start, steps or a forced summary, completion
- steps.py: the step loop; policy.py its rules (pure)
- model_call.py: one step's question to the model; summarize.py: the context window
- tool_step.py: one tool call; approvals.py: answers to pending calls
"""

from o_executor.run.agent import AgentConfig, UserTool
from o_executor.run.deps import (
    AgentGone,
    ModelRequest,
    RunCancelled,
    RunDeps,
    ToolOutcome,
)
from o_executor.run.loop import Completed, Refused, run_agent
from o_executor.run.state import RunInputs, RunState
from o_executor.run.stop import Stopped, StopReason

__all__ = [
    "AgentConfig",
    "AgentGone",
    "Completed",
    "ModelRequest",
    "Refused",
    "RunCancelled",
    "RunDeps",
    "RunInputs",
    "RunState",
    "StopReason",
    "Stopped",
    "ToolOutcome",
    "UserTool",
    "run_agent",
]

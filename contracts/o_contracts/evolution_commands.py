"""Commands to the evolution service, on `o.cmd.evolution.<agent_id>` (one agent's
evolution is decided one command after another on its own subject).

Every one is answered with a Reply (ok, or the refusal's status and reason) and
leaves its decision on the agent's evolution subject (events/evolution.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from o_contracts.base import Command
from o_contracts.events.evolution import ProposalSource, RequestedBy
from o_contracts.evolution import EvolutionConfig, Patch


class ConfigureEvolution(Command):
    agent_id: str
    config: EvolutionConfig


class ProposeChange(Command):
    """Propose a change: this patch, or (None) one the agent's model draws from a digest
    of its recent runs. Refused before any spending if it touches a protected field."""

    agent_id: str
    proposal_id: str
    source: ProposalSource = "operator"
    patch: Patch | None = None


class EvaluateProposal(Command):
    """Replay recent runs in the shadow under parent and candidate, judge, and gate."""

    agent_id: str
    proposal_id: str


class ReviewProposal(Command):
    """A human's approval or rejection of a proposal."""

    agent_id: str
    proposal_id: str
    approve: bool
    note: str = Field(default="", max_length=2000)


class PromoteProposal(Command):
    """Serve an approved, accepted proposal's version to all traffic."""

    agent_id: str
    proposal_id: str


class StartRollout(Command):
    """Start a canary of an accepted (and, if configured, approved) proposal: the
    candidate takes the first step's share of conversations."""

    agent_id: str
    proposal_id: str


class AbortRollout(Command):
    """End the running canary at once: every conversation goes back to the stable agent."""

    agent_id: str
    reason: str = Field(default="aborted by an operator", max_length=2000)


class RunEvolutionTool(Command):
    """An agent's call of one of its evolution tools (base_tools.EVOLUTION_TOOLS), on the
    subject of the agent it concerns (`agent_id`: the caller itself, or the primary of a
    sleep-time companion). Answered with the tool's text; recorded as EvolutionToolCalled."""

    agent_id: str
    caller_agent_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class RollBackVersion(Command):
    """Serve an earlier version again, from the next request on."""

    agent_id: str
    version_id: str
    # Who asked (an operator through the API, or the agent through its own tool) and why.
    requested_by: RequestedBy = "operator"
    reason: str = Field(default="", max_length=2000)

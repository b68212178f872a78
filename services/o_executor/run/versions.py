"""Which version of the agent a run serves: the agent as configured, or, in a canary, the
candidate's version for the conversations its weight takes (issue 14 point 5).

Pure: the arm is decided by o_evolution/canary.py's stable hash of agent, conversation
and rollout, so every executor replica chooses the same arm for a conversation and a
conversation keeps its arm as the weight grows. A run on the agent's default
conversation (no conversation id) is split by its own id: each message there is its
own unit, as a request is in a web canary.

A run resumed after a crash keeps the arm its RunStarted recorded, whatever the weight
says now: a run is never half one version and half the other.
"""

from __future__ import annotations

import dataclasses

from o_contracts.evolution import ServedVersion, VersionSpec
from o_evolution.canary import arm
from o_executor.run.agent import AgentConfig, Rollout


def with_version(agent: AgentConfig, spec: VersionSpec) -> AgentConfig:
    """The agent with a version's configuration: system prompt, built-in tools, tool
    rules, model settings, and its evolvable blocks' values in place of the agent's.
    (Users' tools stay attached only if the version lists them.)"""
    users = {name: tool for name, tool in agent.user_tools.items() if name in spec.tools}
    return dataclasses.replace(
        agent,
        system=spec.system,
        tools=tuple(t for t in spec.tools if t not in agent.user_tools),
        tool_rules=tuple(dict(r) for r in spec.tool_rules),
        user_tools=users,
        llm_config=agent.llm_config | spec.model_settings,
        block_values=dict(spec.blocks),
    )


def with_candidate(agent: AgentConfig, rollout: Rollout) -> AgentConfig:
    """A canary's candidate arm: the version's configuration, and the proposal's block edits
    made on the agent's blocks as they are when each prompt is built, so what a run's memory
    tools wrote there (on either arm) shows in the next run. A block the proposal does not
    edit is the agent's own; where an edit no longer applies, the version's text stands in."""
    version = with_version(agent, rollout.spec)
    if not rollout.edits:
        return version
    return dataclasses.replace(
        version,
        block_values={k: v for k, v in rollout.spec.blocks.items() if k in rollout.edits},
        block_edits=dict(rollout.edits),
    )


def served(
    agent: AgentConfig,
    run_id: str,
    conversation_id: str | None,
    recorded: ServedVersion | None,
) -> AgentConfig:
    """The agent as this run serves it, with the arm it took in `served`."""
    rollout = agent.rollout
    if rollout is None:
        return agent
    if recorded is not None:
        # Resumed: the recorded arm, if its canary still runs; else the agent as it is
        # (a promoted candidate is the agent by now, an aborted one is gone).
        same = recorded.rollout_id == rollout.rollout_id
        took = recorded.arm if same else "stable"
        choice = recorded
    else:
        took = arm(agent.id, conversation_id or run_id, rollout.rollout_id, rollout.weight)
        choice = ServedVersion(
            rollout_id=rollout.rollout_id,
            arm=took,
            version_id=rollout.version_id if took == "candidate" else rollout.stable_version,
            weight=rollout.weight,
        )
    chosen = with_candidate(agent, rollout) if took == "candidate" else agent
    return dataclasses.replace(chosen, rollout=None, served=choice)

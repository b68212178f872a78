"""Agent decisions as given (the agent's state) / when (a command) / then (the event or refusal).

No servers: decide.py is pure. What routes send and the log records is
checked end to end in tests/e2e/test_agents_and_blocks.py and test_tools.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from o_contracts.base import Event
from o_contracts.events import (
    AgentDeleted,
    AgentUpdated,
    BlockAttached,
    BlockDetached,
    ToolAttached,
    ToolDetached,
)
from o_contracts.models import BlockSpec, ToolRule
from o_gateway.decisions import (
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
    Refused,
    SetToolApproval,
    UpdateAgent,
    UserTool,
    decide,
)
from o_gateway.decisions.agent import AgentView, AttachedBlock, reads_blocks, reads_tool_names

AGENT = "agent-00000000-0000-4000-8000-000000000001"
HUMAN = AttachedBlock(id="block-human", label="human")
WEATHER = UserTool(id="tool-weather", name="get_weather", requires_approval=False)
DEPLOY = UserTool(id="tool-deploy", name="deploy", requires_approval=True)


def given(**state: Any) -> AgentView:
    return AgentView(id=AGENT, **state)


def when(command: AgentChange, agent: AgentView | None) -> Event | None:
    return decide.change_agent(command, agent)


def refused(command: AgentChange, agent: AgentView | None) -> Refused:
    with pytest.raises(Refused) as caught:
        when(command, agent)
    return caught.value


def create(**fields: Any) -> CreateAgent:
    defaults: dict[str, Any] = {
        "agent_id": AGENT,
        "name": "calm-otter",
        "system": "You are helpful.",
        "agent_type": "letta_v1_agent",
        "llm_config": {"handle": "openai/gpt-4o-mini"},
        "embedding_config": None,
        "tools": ["memory_insert"],
        "user_tools": [],
        "tool_rules": [],
        "metadata": None,
        "new_blocks": [],
        "block_ids": [],
        "tags": [],
        "description": None,
        "timezone": "UTC",
        "encrypted_secrets": {},
        "idempotency_key": None,
    }
    return CreateAgent(**(defaults | fields))


# Creating


def test_a_new_agent_names_its_new_blocks_before_the_existing_ones() -> None:
    new = NewBlock(block_id="block-new", spec=BlockSpec(label="persona"), command_id=None)
    event = decide.create_agent(create(new_blocks=[new], block_ids=["block-old"]))
    assert event.block_ids == ["block-new", "block-old"]
    assert event.metadata == {} and event.timezone == "UTC"


def test_user_tools_that_ask_for_approval_add_a_rule_after_the_given_ones() -> None:
    given_rule = {"type": "exit_loop", "tool_name": "get_weather"}
    event = decide.create_agent(create(user_tools=[WEATHER, DEPLOY], tool_rules=[given_rule]))
    assert event.tool_ids == ["tool-weather", "tool-deploy"]
    assert event.tool_rules == [
        ToolRule.model_validate(given_rule),
        ToolRule(type="requires_approval", tool_name="deploy"),
    ]


def test_a_bad_tool_rule_refuses_the_agent() -> None:
    with pytest.raises(Refused) as caught:
        decide.create_agent(create(tool_rules=[{"type": "sometimes", "tool_name": "x"}]))
    assert caught.value.status == 422
    assert caught.value.reason.startswith("tool_rules[0]: unknown type 'sometimes'")


def test_bad_memory_stream_settings_refuse_the_agent() -> None:
    with pytest.raises(Refused) as caught:
        decide.create_agent(create(metadata={"memory_stream": "fast"}))
    assert (caught.value.status, caught.value.reason) == (
        400,
        "metadata.memory_stream must be an object",
    )


# Any change


def test_a_change_to_an_agent_that_does_not_exist_is_a_404() -> None:
    for command in (DeleteAgent(AGENT), UpdateAgent(AGENT, AgentChanges(name="x"))):
        exc = refused(command, None)
        assert (exc.status, exc.reason) == (404, f"Agent {AGENT} not found")


def test_update_lists_only_what_it_sets_in_a_fixed_order() -> None:
    changes = AgentChanges(tool_ids=["tool-weather"], name="new", metadata={}, tags=[])
    event = when(UpdateAgent(AGENT, changes), given())
    assert isinstance(event, AgentUpdated)
    # An empty list or object is a change (it clears the field); None is not.
    assert list(event.changes) == ["name", "tags", "metadata", "tool_ids"]


def test_an_update_that_sets_nothing_appends_nothing() -> None:
    assert when(UpdateAgent(AGENT, AgentChanges()), given()) is None


def test_delete() -> None:
    assert when(DeleteAgent(AGENT), given()) == AgentDeleted(agent_id=AGENT)


# Blocks


def test_attach_a_block() -> None:
    event = when(AttachBlock(AGENT, "block-persona", "persona"), given(blocks=(HUMAN,)))
    assert event == BlockAttached(agent_id=AGENT, block_id="block-persona")


def test_attaching_an_attached_block_changes_nothing() -> None:
    assert when(AttachBlock(AGENT, HUMAN.id, HUMAN.label), given(blocks=(HUMAN,))) is None


def test_an_agent_cannot_hold_two_blocks_with_one_label() -> None:
    exc = refused(AttachBlock(AGENT, "block-other", "human"), given(blocks=(HUMAN,)))
    assert (exc.status, exc.reason) == (409, f"agent {AGENT} already has a block labelled 'human'")


def test_detach_a_block() -> None:
    event = when(DetachBlock(AGENT, HUMAN.id), given(blocks=(HUMAN,)))
    assert event == BlockDetached(agent_id=AGENT, block_id=HUMAN.id)


def test_detaching_a_block_that_is_not_attached_is_a_404() -> None:
    exc = refused(DetachBlock(AGENT, "block-other"), given(blocks=(HUMAN,)))
    assert (exc.status, exc.reason) == (404, f"Block block-other is not attached to agent {AGENT}")


# Tools


def test_attach_a_builtin_tool_extends_the_list_of_names() -> None:
    event = when(AttachTool(AGENT, BuiltinTool("web_search")), given(tools=("memory_insert",)))
    assert event == AgentUpdated(agent_id=AGENT, changes={"tools": ["memory_insert", "web_search"]})
    assert (
        when(AttachTool(AGENT, BuiltinTool("memory_insert")), given(tools=("memory_insert",)))
        is None
    )


def test_attach_a_user_tool_with_its_approval_default() -> None:
    event = when(
        AttachTool(AGENT, DEPLOY), given(tool_ids=(WEATHER.id,), user_tool_names=(WEATHER.name,))
    )
    assert event == ToolAttached(
        agent_id=AGENT, tool_id=DEPLOY.id, requires_approval=True, tool_name="deploy"
    )
    assert when(AttachTool(AGENT, DEPLOY), given(tool_ids=(DEPLOY.id,))) is None


@pytest.mark.parametrize(
    "state",
    [
        {"tools": ("get_weather",)},
        {"tool_ids": ("tool-other",), "user_tool_names": ("get_weather",)},
    ],
)
def test_two_tools_of_an_agent_cannot_share_a_name(state: dict[str, Any]) -> None:
    exc = refused(AttachTool(AGENT, WEATHER), given(**state))
    assert (exc.status, exc.reason) == (409, "the agent already has a tool named 'get_weather'")


def test_detach_tools() -> None:
    agent = given(tools=("memory_insert", "web_search"), tool_ids=(WEATHER.id,))
    builtin = DetachTool(AGENT, "tool-builtin-id", BuiltinTool("web_search"))
    assert when(builtin, agent) == AgentUpdated(
        agent_id=AGENT, changes={"tools": ["memory_insert"]}
    )
    assert when(DetachTool(AGENT, WEATHER.id, None), agent) == ToolDetached(
        agent_id=AGENT, tool_id=WEATHER.id
    )
    # What the agent does not have is not detached again.
    assert when(DetachTool(AGENT, "x", BuiltinTool("send_message")), agent) is None
    assert when(DetachTool(AGENT, DEPLOY.id, None), agent) is None


def test_requiring_approval_adds_one_rule_and_keeps_the_others() -> None:
    exit_rule = {"type": "exit_loop", "tool_name": "get_weather"}
    agent = given(tool_ids=(WEATHER.id,), user_tool_names=("get_weather",), tool_rules=(exit_rule,))
    event = when(SetToolApproval(AGENT, "get_weather", True), agent)
    assert event == AgentUpdated(
        agent_id=AGENT,
        changes={
            "tool_rules": [exit_rule, {"type": "requires_approval", "tool_name": "get_weather"}]
        },
    )


def test_approval_set_as_it_is_changes_nothing() -> None:
    rule = {"type": "requires_approval", "tool_name": "memory_insert"}
    agent = given(tools=("memory_insert",), tool_rules=(rule,))
    assert when(SetToolApproval(AGENT, "memory_insert", True), agent) is None
    assert when(SetToolApproval(AGENT, "memory_insert", False), agent) == AgentUpdated(
        agent_id=AGENT, changes={"tool_rules": []}
    )
    assert (
        when(SetToolApproval(AGENT, "memory_insert", False), given(tools=("memory_insert",)))
        is None
    )


def test_approval_of_a_tool_the_agent_does_not_have_is_a_404() -> None:
    exc = refused(SetToolApproval(AGENT, "deploy", True), given(tools=("memory_insert",)))
    assert (exc.status, exc.reason) == (404, f"agent {AGENT} has no tool named 'deploy'")


# What each decision reads


def test_each_decision_reads_only_what_it_needs() -> None:
    assert reads_blocks(AttachBlock(AGENT, "b", "l")) and reads_blocks(DetachBlock(AGENT, "b"))
    assert not reads_blocks(AttachTool(AGENT, WEATHER))
    assert reads_tool_names(AttachTool(AGENT, WEATHER))
    assert reads_tool_names(SetToolApproval(AGENT, "x", True))
    assert not reads_tool_names(AttachTool(AGENT, BuiltinTool("web_search")))
    assert not reads_tool_names(DetachTool(AGENT, WEATHER.id, None))
    assert not reads_tool_names(UpdateAgent(AGENT, AgentChanges(name="x")))

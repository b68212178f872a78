"""A run's preview (o_executor/preview.py): the loop's first question to the model, caught,
with nothing recorded; and the runs that would act or end before asking one."""

from __future__ import annotations

import copy

import pytest

from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.models import ApprovalDecision, ChatMessage, ToolCall
from o_executor.preview import NotPreviewable, PreviewDeps, first_request
from o_executor.providers import Handle
from o_executor.run import RunInputs
from o_memory.core_memory import CoreMemory
from tests.unit.loop_scenarios import AGENT_ID, HUMAN_BLOCK, RUN_ID, agent

HISTORY = [
    ChatMessage(id="message-1", role="user", content="hello"),
    ChatMessage(id="message-2", role="assistant", content="Hello Sam."),
]


def command(text: str = "I like tea", **extra: object) -> Envelope[StartRun]:
    messages = [ChatMessage(id="message-3", role="user", content=text)] if text else []
    return Envelope.wrap(
        StartRun(run_id=RUN_ID, agent_id=AGENT_ID, messages=messages, **extra),  # type: ignore[arg-type]
        aggregate_id=AGENT_ID,
        producer="test",
    )


def deps(blocks: list[dict[str, object]] | None = None) -> PreviewDeps:
    async def core() -> CoreMemory:
        return {
            "blocks": copy.deepcopy(blocks or [dict(HUMAN_BLOCK)]),
            "archival_count": 0,
            "archival_tags": [],
        }  # type: ignore[typeddict-item]

    return PreviewDeps(core)


async def test_the_first_question_is_the_prompt_the_run_would_send_and_nothing_is_kept() -> None:
    preview = deps()
    asked = await first_request(RunInputs(command(), agent(), list(HISTORY)), preview)
    assert asked.handle == Handle.parse("openai/gpt-4o-mini")
    system, *rest = asked.messages
    assert system["role"] == "system" and "Name: Sam" in system["content"]
    assert [m["content"] for m in rest] == ["hello", "Hello Sam.", "I like tea"]
    assert {t["function"]["name"] for t in asked.tools} >= {"memory_insert"}
    assert preview.completed is None  # the run stopped at the question


async def test_answers_to_pending_calls_are_not_previewed() -> None:
    waiting = ChatMessage(
        id="message-2",
        role="assistant",
        tool_calls=[ToolCall(id="call-1", name="memory_insert", arguments="{}")],
        approval_request=True,
        approval_tool_call_ids=["call-1"],
    )
    answer = ApprovalDecision(tool_call_id="call-1", approve=True)
    inputs = RunInputs(command("", approvals=[answer]), agent(), [HISTORY[0], waiting])
    with pytest.raises(NotPreviewable, match="a preview sends new messages only"):
        await first_request(inputs, deps())


async def test_a_run_that_ends_before_asking_says_why() -> None:
    huge = [dict(HUMAN_BLOCK) | {"value": "x" * 1_000_000, "limit": 2_000_000}]
    reason = "would end before asking the model: context_window_overflow_in_system_prompt"
    with pytest.raises(NotPreviewable, match=reason):
        await first_request(RunInputs(command(), agent(), []), deps(huge))

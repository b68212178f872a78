"""The answer that ends a run is recorded with the run's end (RunCompleted.answer): one
event fewer a run. Given/when/then over what the run appends, with no servers (the
log, the projection and the streams reading it: tests/e2e/test_final_answer.py)."""

from __future__ import annotations

from o_contracts.events import LLMResponded, RunCompleted, facts
from o_contracts.ids import derived_id
from o_contracts.limits import NATS_MAX_PAYLOAD
from o_contracts.models import ChatMessage, Usage
from o_executor.live.tools import PRODUCER
from o_runtime.eventlog import HEADERS_ROOM
from tests.unit.loop_scenarios import AGENT_ID, RUN_ID, Then, agent, call, say, started, when

LIMIT = NATS_MAX_PAYLOAD - HEADERS_ROOM


def appended_types(then: Then) -> list[str]:
    return [type(e).__name__ for e in then.appended]


def end(then: Then) -> RunCompleted:
    last = then.appended[-1]
    assert isinstance(last, RunCompleted)
    return last


async def test_an_answer_that_ends_the_run_rides_in_its_run_completed() -> None:
    then = await when(agent(), [say("Hello!")])
    assert appended_types(then) == ["RunStarted", "RunCompleted"]
    answer = end(then).answer
    assert answer is not None and answer.message.content == "Hello!"
    assert answer.step_number == 0 and answer.step_id.startswith("step-")
    # Read as facts, the run is what it always was: its start, its answer, its end.
    assert then.types == ["RunStarted", "LLMResponded", "RunCompleted"]
    assert end(then).step_count == 1 and then.stop_reason == "end_turn"


async def test_an_answer_with_tool_calls_is_recorded_before_they_run() -> None:
    then = await when(agent(), [call("conversation_search", query="tea"), say("Found it.")])
    assert appended_types(then) == ["RunStarted", "LLMResponded", "ToolReturned", "RunCompleted"]
    first = then.appended[1]
    assert isinstance(first, LLMResponded) and first.message.tool_calls
    answer = end(then).answer
    assert answer is not None and answer.step_number == 1
    assert answer.message.content == "Found it."


async def test_an_answer_that_waits_for_approval_rides_in_the_run_end() -> None:
    rules = [{"type": "requires_approval", "tool_name": "memory_insert"}]
    then = await when(agent(rules=rules), [call("memory_insert", label="human", new_string="x")])
    assert then.stop_reason == "requires_approval"
    assert appended_types(then) == ["RunStarted", "RunCompleted"]
    answer = end(then).answer
    assert answer is not None and answer.message.approval_request
    assert [c.name for c in answer.message.tool_calls] == ["memory_insert"]


async def test_a_final_answer_recorded_before_a_crash_is_not_recorded_again() -> None:
    # The log holds the run's last answer as an LLMResponded of its own (recorded so by
    # an earlier version, or alone because it was too large to ride): the resumed run
    # ends without asking the model, and its end carries no second copy.
    recorded = [started(), answered(0, "Before the crash.")]
    then = await when(agent(), [], recorded=recorded)
    assert appended_types(then) == ["RunCompleted"]
    assert end(then).answer is None and end(then).step_count == 1


async def test_too_large_together_the_answer_goes_alone_then_the_end() -> None:
    probe = await when(agent(), [say("x" * 100_000)])
    merged, alone = sizes(probe)
    # An answer that fits the log alone, not with the run's end around it.
    text = "x" * (100_000 + LIMIT - alone - (merged - alone) // 2)
    then = await when(agent(), [say(text)])
    assert appended_types(then) == ["RunStarted", "LLMResponded", "RunCompleted"]
    assert then.appended[1].message.content == text  # type: ignore[attr-defined]
    assert end(then).answer is None and then.stop_reason == "end_turn"


async def test_an_answer_too_large_even_alone_ends_the_run_in_error_without_it() -> None:
    then = await when(agent(), [say("x" * LIMIT)])
    assert appended_types(then) == ["RunStarted", "RunCompleted"]
    assert end(then).answer is None
    assert then.stop_reason == "error" and "over the log's limit" in (end(then).error or "")


def test_facts_reads_a_run_end_with_its_answer_as_the_two_facts() -> None:
    answer = answered(0, "Hi.")
    ended = RunCompleted(run_id=RUN_ID, agent_id=AGENT_ID, stop_reason="end_turn", answer=answer)
    assert facts(ended) == (answer, ended.model_copy(update={"answer": None}))
    plain = RunCompleted(run_id=RUN_ID, agent_id=AGENT_ID, stop_reason="end_turn")
    assert facts(plain) == (plain,)
    assert facts(answer) == (answer,)


def sizes(then: Then) -> tuple[int, int]:
    """The run's end with its answer, and the answer alone, as the log would hold them."""
    ended = end(then)
    assert ended.answer is not None
    command = then.deps.command

    def size(event: LLMResponded | RunCompleted, key: str) -> int:
        wrapped = command.caused(
            event, aggregate_id=AGENT_ID, producer=PRODUCER, id=derived_id("evt", RUN_ID, key)
        )
        return len(wrapped.encode())

    return size(ended, "completed"), size(ended.answer, "llm-0")


def answered(step: int, text: str) -> LLMResponded:
    return LLMResponded(
        run_id=RUN_ID,
        agent_id=AGENT_ID,
        step_id=f"step-{step}",
        step_number=step,
        message=ChatMessage(id=f"message-a{step}", role="assistant", content=text),
        usage=Usage(prompt_tokens=10),
        model="openai/gpt-4o-mini",
    )

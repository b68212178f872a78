"""Summarizing older turns when the context fills up (and on POST .../summarize).

Past SUMMARIZE_AT of the window, older turns are summarized by the model down
to KEEP_AFTER_SUMMARY; the summary is recorded (ContextSummarized) before it is
used, so a resumed run applies the same one instead of asking again.
"""

from __future__ import annotations

from o_contracts.events import ContextSummarized
from o_contracts.models import ChatMessage
from o_executor import llm, tokens
from o_executor.outputs import MAX_SUMMARY_CHARS, bounded
from o_executor.providers import Handle
from o_executor.run.context import Run
from o_executor.run.deps import ModelRequest
from o_executor.run.state import RunState

SUMMARIZE_AT = 0.9
KEEP_AFTER_SUMMARY = 0.5
SUMMARIZER_PROMPT = (
    "You summarize the earlier part of a conversation between an AI agent and a user, so the"
    " agent can continue it without the full transcript. Keep facts about the user, decisions,"
    " open tasks and the results of tool calls. Write at most a few short paragraphs."
)
SUMMARY_PREFIX = (
    "Note: prior messages have been hidden from view due to conversation memory constraints."
    " The following is a summary of the previous messages:\n"
)


def apply_summary(state: RunState, messages: list[ChatMessage], event: ContextSummarized) -> None:
    """Replace the evicted messages by the summary (also when replaying a recorded one)."""
    if event.evicted_message_ids:  # (a version 1 event)
        gone = set(event.evicted_message_ids)
        kept = [m for m in messages if m.id not in gone]
        evicted = len(messages) - len(kept)
    elif event.first_kept_message_id is None:
        evicted, kept = len(messages), []  # all of them
    else:
        # Every message before the first kept one left.
        evicted = next(
            (i for i, m in enumerate(messages) if m.id == event.first_kept_message_id), 0
        )
        kept = messages[evicted:]
    messages[:] = [event.summary, *kept]
    state.run_start = max(1, state.run_start - evicted + 1)


async def summarize(
    run: Run,
    handle: Handle,
    messages: list[ChatMessage],
    step: int,
    window: int,
    force: bool = False,
    everything: bool = False,
) -> ContextSummarized | None:
    """Summarize older turns into one message, recorded before it is used.

    Cuts only where a user turn begins, so a tool call is never separated from
    its result, and never inside this run, so a pending approval (always the
    end of the previous run's turn, answered by this one) stays whole.
    """
    state = run.state
    family = llm.family(handle)
    if everything:
        # (A forced summarize of the whole context: nothing of this run is in it.)
        cuts = [len(messages)] if messages else []
    else:
        cuts = [
            i
            for i in range(1, min(state.run_start, len(messages) - 1) + 1)
            if messages[i].role == "user" and messages[i].id is not None
        ]
    if not cuts:
        return None
    cut = cuts[-1]
    if not force and not everything:
        budget = KEEP_AFTER_SUMMARY * window
        for i in cuts:
            rest = tokens.estimate_request("", llm.to_openai_messages(messages[i:]), [], family)
            if state.tokens(rest) <= budget:
                cut = i
                break
    evicted = messages[:cut]
    transcript = "\n".join(
        f"{m.role}: {m.content or ''}"
        + "".join(f" [called {tc.name}({tc.arguments})]" for tc in m.tool_calls)
        for m in evicted
    )
    result = await run.deps.complete(
        ModelRequest(
            handle,
            [
                {"role": "system", "content": SUMMARIZER_PROMPT},
                {"role": "user", "content": transcript},
            ],
            [],
        ),
        cancellable=False,
    )
    state.usage = state.usage + result.usage
    summary = ChatMessage(
        id=run.message_id(step, "summary"),
        role="user",
        content=SUMMARY_PREFIX + bounded(result.content or "", MAX_SUMMARY_CHARS),
    )
    event = ContextSummarized(
        run_id=run.run_id,
        agent_id=run.agent_id,
        step_number=step,
        summary=summary,
        evicted_count=len(evicted),
        first_kept_message_id=messages[cut].id if cut < len(messages) else None,
        messages_before=len(messages),
        messages_after=len(messages) - cut + 1,
    )
    await run.record(event, f"summary-{step}")
    apply_summary(state, messages, event)
    return event

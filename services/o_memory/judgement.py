"""What the memory service asks the agent's own LLM: how important a memory is, and
which insights a batch of memories supports (Generative Agents' prompts).

The prompts and the reading of the answers; the asking is the caller's (`Ask`: the
memory service asks the executor, o_memory/model_calls.py). The answers are recorded in
events before they are used, so a replay never asks again.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from o_contracts.models import Usage

DEFAULT_IMPORTANCE = 5

IMPORTANCE_PROMPT = (
    "On the scale of 1 to 10, where 1 is purely mundane (e.g., brushing teeth, making bed) "
    "and 10 is extremely poignant (e.g., a break up, college acceptance), rate the likely "
    "poignancy of the following piece of memory. Answer with the number only.\n"
    "Memory: {memory}\nRating:"
)

REFLECTION_PROMPT = (
    "Statements about the person and the conversation so far:\n{statements}\n\n"
    "What {count} high-level insights can you infer from the above statements? Write one "
    "insight per line, each ending with the numbers of the statements it is based on, in "
    "this form:\ninsight text (because of 1, 5, 3)"
)


@dataclass(frozen=True)
class Answer:
    text: str | None
    usage: Usage = field(default_factory=Usage)


# The agent's model asked `prompt` with the agent's llm_config; Answer(None) when it
# could not answer.
Ask = Callable[[dict[str, Any], str], Awaitable[Answer]]


_RATING = re.compile(r"^\s*(?:rating\s*[:=]?\s*)?(10|[1-9])(?:\s*/\s*10)?\b", re.IGNORECASE)


def parse_rating(answer: str | None) -> int | None:
    """The number the answer starts with ("7", "Rating: 7", "7/10"); else None."""
    match = _RATING.match(answer or "")
    return int(match.group(1)) if match else None


async def rate_importance(
    ask: Ask, llm_config: dict[str, Any], text: str
) -> tuple[int, Literal["llm", "default"]]:
    """(importance 1-10, source): the model's rating, or the neutral default."""
    rating = parse_rating((await ask(llm_config, IMPORTANCE_PROMPT.format(memory=text))).text)
    if rating is None:
        return DEFAULT_IMPORTANCE, "default"
    return rating, "llm"


@dataclass(frozen=True)
class Insight:
    text: str
    # Indexes into the statements given to the model.
    cites: list[int]


_INSIGHT = re.compile(r"^\s*(?:[-*]|\d+[.)])?\s*(?P<text>.+?)\s*\(because of (?P<cites>[\d,\s]+)\)")


def parse_insights(answer: str | None, statement_count: int) -> list[Insight]:
    """Lines of the form `insight (because of 1, 3)`; uncited or miscited lines are dropped."""
    found = []
    for line in (answer or "").splitlines():
        match = _INSIGHT.match(line)
        if not match:
            continue
        cites = sorted(
            {int(n) - 1 for n in re.findall(r"\d+", match.group("cites"))}
            & set(range(statement_count))
        )
        if cites and match.group("text"):
            found.append(Insight(match.group("text"), cites))
    return found


async def reflect(
    ask: Ask, llm_config: dict[str, Any], statements: list[str], count: int = 3
) -> tuple[list[Insight], Usage]:
    """The insights the model draws (at most `count`), and what asking cost."""
    numbered = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(statements))
    answer = await ask(llm_config, REFLECTION_PROMPT.format(statements=numbered, count=count))
    return parse_insights(answer.text, len(statements))[:count], answer.usage

"""The judge: a model and a rubric fixed by the operator, outside anything a candidate can
change (DGM's lesson: a variant that could touch its evaluator scored perfectly by
deleting what the check relied on). It compares two answers to one input; the caller asks
twice, in both orders, because LLM judges favour a position (o_evolution/gate.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from o_contracts.experiments import Preference
from o_contracts.models import Usage
from o_executor import llm
from o_executor.providers import Handle

RUBRIC = (
    "You compare two answers an AI assistant could give to the same conversation. Judge"
    " which better serves the user: correct, helpful, following the user's instructions,"
    " honest about what it did not do. Length is not a virtue by itself.\n"
    "Reply with exactly one word: A, B, or tie."
)
_VERDICT = re.compile(r"^\W*(A|B|tie)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Judgement:
    preference: Preference
    usage: Usage


def prompt(conversation: str, answer_a: str, answer_b: str) -> str:
    return (
        f"Conversation:\n{conversation}\n\n"
        f"Answer A:\n{answer_a or '(no answer)'}\n\n"
        f"Answer B:\n{answer_b or '(no answer)'}\n\n"
        "Which answer is better? A, B, or tie?"
    )


def parse(text: str | None) -> Preference:
    """The verdict the answer starts with; anything else counts as a tie."""
    match = _VERDICT.match(text or "")
    if match is None:
        return "tie"
    word = match.group(1)
    return "tie" if word.lower() == "tie" else "A" if word.upper() == "A" else "B"


async def judge(
    model: str, conversation: str, answer_a: str, answer_b: str, retries: llm.Retries
) -> Judgement:
    result = await llm.complete(
        Handle.parse(model),
        [
            {"role": "system", "content": RUBRIC},
            {"role": "user", "content": prompt(conversation, answer_a, answer_b)},
        ],
        [],
        retries=retries,
    )
    return Judgement(parse(result.content), result.usage)

"""The system prompt kept per conversation (o_executor/run/system_prompts.py): compiled
again only when what it says changes, as Letta's loop rebuilds it."""

from __future__ import annotations

from collections.abc import Callable

from o_executor.run.system_prompts import PromptMemory, SystemPrompts

HUMAN = {"label": "human", "value": "Name: Sam"}


def memory(value: str = "Name: Sam", rules: str = "") -> PromptMemory:
    return PromptMemory("You are Sam.", [HUMAN | {"value": value}], "", rules)


def test_kept_while_memory_is_the_same_compiled_again_when_it_changes() -> None:
    prompts = SystemPrompts()
    compiled: list[str] = []

    def compile_as(text: str) -> Callable[[], str]:
        def compile_prompt() -> str:
            compiled.append(text)
            return text

        return compile_prompt

    assert prompts.prompt("a", None, memory(), compile_as("first")) == "first"
    assert prompts.prompt("a", None, memory(), compile_as("second")) == "first"
    # Another conversation of the agent has its own.
    assert prompts.prompt("a", "conv-1", memory(), compile_as("conv")) == "conv"
    # A block, the tool rules or the system text changed: compiled again, and kept.
    assert prompts.prompt("a", None, memory("Name: Sam Lee"), compile_as("third")) == "third"
    assert prompts.prompt("a", None, memory("Name: Sam Lee"), compile_as("x")) == "third"
    assert prompts.prompt("a", None, memory("Name: Sam Lee", "rules"), compile_as("4th")) == "4th"
    assert compiled == ["first", "conv", "third", "4th"]


def test_the_least_recently_used_conversation_is_forgotten_first() -> None:
    prompts = SystemPrompts(max_kept=2)
    prompts.prompt("a", None, memory(), lambda: "a1")
    prompts.prompt("b", None, memory(), lambda: "b1")
    assert prompts.prompt("a", None, memory(), lambda: "a2") == "a1"  # (a used last)
    prompts.prompt("c", None, memory(), lambda: "c1")
    assert prompts.prompt("b", None, memory(), lambda: "b2") == "b2"  # b was forgotten
    assert prompts.prompt("a", None, memory(), lambda: "a3") == "a3"  # then a, for b

"""The system prompt a conversation's model is sent, kept while what it says stays the same.

As in Letta (its loop rebuilds the system message only when the agent's system text, its
memory blocks, its files or its tool rules changed), the prompt is compiled again only when
one of those changes; its metadata (when it was compiled, how many messages there are, how
many archival memories) is brought up to date then, and stays as it was between changes.
So every step and turn of a conversation sends the very same first message until its memory
changes, and a provider's prompt cache (OpenAI's automatic prefix caching, Anthropic's) can
serve the whole prefix: compiled afresh at each step, the time in the metadata (to the
second) made every request's first message new, and nothing could ever be cached.

Kept per process (the executor's, for the conversations it runs; a shadow run's own), not
in the log: a run's steps all run in one process, so a tool loop's requests share their
prefix whatever the deployment; with several executors, each compiles a conversation's
prompt once (until its memory changes) and keeps its own text, so a provider caches one
prefix per replica. At most MAX_KEPT conversations, the least recently used forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Conversations whose prompt is kept (a prompt is a few kB to a few tens of kB).
MAX_KEPT = 2000


@dataclass(frozen=True)
class PromptMemory:
    """What the prompt says that, changed, makes it compiled again (Letta's check: the
    system text, and the memory with its files and tool rules)."""

    system: str
    blocks: list[dict[str, Any]]
    directories: str
    tool_rules: str


class SystemPrompts:
    def __init__(self, max_kept: int = MAX_KEPT) -> None:
        self.max_kept = max_kept
        self._kept: OrderedDict[tuple[str, str | None], tuple[PromptMemory, str]] = OrderedDict()

    def prompt(
        self,
        agent_id: str,
        conversation_id: str | None,
        memory: PromptMemory,
        compile_prompt: Callable[[], str],
    ) -> str:
        """The conversation's prompt as kept if `memory` is what it was compiled from;
        else `compile_prompt()`, kept from now on."""
        key = (agent_id, conversation_id)
        kept = self._kept.get(key)
        if kept is not None and kept[0] == memory:
            self._kept.move_to_end(key)
            return kept[1]
        text = compile_prompt()
        self._kept[key] = (memory, text)
        self._kept.move_to_end(key)
        while len(self._kept) > self.max_kept:
            self._kept.popitem(last=False)
        return text

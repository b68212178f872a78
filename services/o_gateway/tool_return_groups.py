"""One step's tool results shown as one message, as Letta shows them.

Letta keeps the results of one step's tool calls (a model's parallel calls, or the
answers to an approval request with the calls held beside them) in one tool message
that carries every result, and shows it as one `tool_return_message`: each result in
`tool_returns`, the first one also in the older single-result fields (`tool_return`,
`status`, `tool_call_id`, `stdout`, `stderr`). Clients count on it: Letta's
`test_parallel_tool_calling` reads four results from one message.

O records each result as its own `ToolReturned` (a run resumed mid-step runs no
finished call again) and stores each as its own message. Grouping is only how they
are shown, decided here and nowhere else: the tool messages of one step (same run,
same step id) that follow one another are one group. A group is one message wherever
a client sees messages: one id (its first shown result's), one otid, one place in a
list, one unit of a list's `limit`, and a cursor naming it skips all of it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from o_contracts.models import ChatMessage

T = TypeVar("T")
Chunk = dict[str, Any]  # one Letta API message, as render.py makes it
StepKey = tuple[str, str]  # (run id, step id)

TOOL_RETURN = "tool_return_message"


def step_key(role: str | None, run_id: str | None, step_id: str | None) -> StepKey | None:
    """The group a stored message belongs to: a tool result's step, None for others
    (every other message is a group of its own)."""
    if role != "tool" or not run_id or not step_id:
        return None
    return (run_id, step_id)


def message_key(message: ChatMessage, run_id: str | None, step_id: str | None) -> StepKey | None:
    return step_key(message.role, run_id, step_id)


def grouped(items: Iterable[T], key: Callable[[T], Hashable | None]) -> list[list[T]]:
    """`items` in groups, in order: items next to each other with the same key (not
    None) form one group; an item whose key is None is a group of its own."""
    groups: list[list[T]] = []
    last: Hashable | None = None
    for item in items:
        k = key(item)
        if k is not None and groups and k == last:
            groups[-1].append(item)
        else:
            groups.append([item])
        last = k
    return groups


def merged(chunks: list[Chunk]) -> list[Chunk]:
    """The API messages of one group's tool results, as one: the first's fields (id,
    otid, date, its result in the single-result fields) with every result in
    `tool_returns`. Chunks that are not tool results are left as they are."""
    returns = [c for c in chunks if c["message_type"] == TOOL_RETURN]
    if len(returns) < 2:
        return chunks
    first = returns[0]
    one = first | {"tool_returns": [r for c in returns for r in c["tool_returns"]]}
    out: list[Chunk] = []
    for chunk in chunks:
        if chunk["message_type"] != TOOL_RETURN:
            out.append(chunk)
        elif chunk is first:
            out.append(one)
    return out


def shown(
    items: Sequence[T],
    key: Callable[[T], Hashable | None],
    render_one: Callable[[T], list[Chunk]],
    *,
    newest_first: bool = False,
) -> list[Chunk]:
    """Stored messages (in order, or `newest_first`) as the API shows them: each rendered
    by `render_one`, each group's tool results merged into one message (the first
    result first, whichever way the list runs)."""
    out: list[Chunk] = []
    for group in grouped(items, key):
        members = list(reversed(group)) if newest_first else group
        chunks = [c for item in members for c in render_one(item)]
        out += merged(chunks) if len(group) > 1 else chunks
    return out


def first_groups(rows: Sequence[T], key: Callable[[T], Hashable | None], limit: int) -> list[T]:
    """The rows of the first `limit` groups of `rows`."""
    return [row for group in grouped(rows, key)[:limit] for row in group]


def more_rows_needed(rows: Sequence[T], key: Callable[[T], Hashable | None], limit: int) -> int:
    """How many more rows to read (in page order) before the first `limit` groups of
    `rows` are surely whole: a group is whole once a row of another group follows it,
    so `limit` + 1 groups settle the first `limit`. 0: they are."""
    return max(0, limit + 1 - len(grouped(rows, key)))


@dataclass
class StreamedReturns:
    """A streamed run's tool results, held until their step's are all recorded, then sent
    as one message (Letta streams a step's results once its tools have run).

    A step's calls are known from its recorded model answer (`expect`); the calls a
    run's answers to an approval request carry out, from that request
    (`expect_answers`: their step is the one of the first result that comes). Whatever
    else the run records next (another step's result, a model answer, its end) sends
    what is held, whole or not (`flush`): a result is never held past its step. While
    results are awaited (`awaiting`), a stream keeps token deltas of the next answer
    back, so that they follow the results they come after in the log.
    """

    awaited: set[str] = field(default_factory=set)  # calls whose results are to come
    awaited_step: str | None = None  # their step (None: the first result's)
    held: list[Chunk] = field(default_factory=list)
    held_step: str | None = None

    def expect(self, message: ChatMessage, step_id: str) -> None:
        """A recorded answer of the model: its calls run in its step, unless they wait for
        approval (then none of them runs in this run)."""
        if message.tool_calls and not message.approval_request:
            self.awaited, self.awaited_step = {c.id for c in message.tool_calls}, step_id

    def expect_answers(self, call_ids: Iterable[str]) -> None:
        self.awaited, self.awaited_step = set(call_ids), None

    def awaiting(self) -> bool:
        return bool(self.awaited)

    def add(self, step_id: str, call_id: str, chunks: list[Chunk]) -> list[Chunk]:
        """A recorded result (its API messages: none if it is not shown); what to send now."""
        out = self._release() if self.held_step not in (None, step_id) else []
        if self.awaited and self.awaited_step is None:
            self.awaited_step = step_id
        self.held_step = step_id
        self.held += chunks
        if step_id == self.awaited_step and self.awaited:
            self.awaited.discard(call_id)
            if not self.awaited:
                out += self._release()
        # (A result of a step whose calls are not known is held until what comes next.)
        return out

    def flush(self) -> list[Chunk]:
        """What is held, as one message (nothing if nothing is held): the step is over."""
        self.awaited, self.awaited_step = set(), None
        return self._release()

    def _release(self) -> list[Chunk]:
        out = merged(self.held)
        self.held, self.held_step = [], None
        return out

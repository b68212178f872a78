"""Which files an agent has open: the decisions, as pure functions (no I/O).

An agent sees every processed file of its folders; at most max_files_open of them are
open, each showing a window of its lines. Opening one more closes the least recently
opened (Letta's LRU). `open_files` and the open route ask for files by name and window
and are refused whole when one is wrong (strict); attaching a folder, or a file of an
attached folder finishing, opens the new files in bulk, newest first (Letta's bulk
attach). handlers.py reads the state these decide on and appends what they return.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from o_contracts.events.agent_files import FileView
from o_contracts.file_commands import FileOpenRequest
from o_contracts.file_types import ViewStrategy
from o_memory.files.lines import BadWindow, units, window


class Refused(ValueError):
    """Nothing is opened; the message says why (the model or the client reads it)."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class AgentFile:
    """A file of one of the agent's folders."""

    id: str
    name: str
    folder_id: str
    status: str
    strategy: ViewStrategy
    text: str | None = None  # read only when a window must be checked


@dataclass(frozen=True)
class OpenView:
    file_id: str
    file_name: str
    start_line: int | None = None
    end_line: int | None = None


@dataclass(frozen=True)
class Decision:
    opened: list[FileView]
    closed: list[OpenView] = field(default_factory=list)
    summary: str = ""


def _window(request: FileOpenRequest, name: str) -> tuple[int | None, int | None]:
    """open_files' offset and length as a 0-based [start, end) (Letta's reading: a
    length without an offset is ignored)."""
    offset, length = request.offset, request.length
    if offset is not None and offset < 0:
        raise Refused(f"Offset for file {name} must be >= 0 (0-indexed), got {offset}")
    if length is not None and length < 1:
        raise Refused(f"Length for file {name} must be >= 1, got {length}")
    if offset is None:
        return None, None
    return offset, offset + length if length is not None else None


def _previously(view: OpenView) -> str:
    if view.start_line is not None and view.end_line is not None:
        return f" (previously lines {view.start_line}-{view.end_line})"
    if view.start_line is not None:
        return f" (previously lines {view.start_line}-end)"
    return " (previously full file)"


def _described(request: FileOpenRequest, name: str, previous: str) -> str:
    if request.offset is not None and request.length is not None:
        return f"{name} (lines {request.offset + 1}-{request.offset + request.length}){previous}"
    if request.offset is not None:
        return f"{name} (lines {request.offset + 1}-end){previous}"
    return f"{name}{previous}"


def _find(request: FileOpenRequest, files: list[AgentFile]) -> AgentFile:
    for f in files:
        if f.id == request.file_id or (
            request.file_name is not None and f.name == request.file_name
        ):
            return f
    asked = request.file_name or request.file_id
    if request.file_id is not None:
        raise Refused(f"File {asked} is not attached to this agent", 404)
    raise Refused(
        f"{asked} not attached - did you get the filename correct? Currently you have the"
        f" following files attached: {[f.name for f in files]}"
    )


def open_strict(
    requests: list[FileOpenRequest],
    close_all_others: bool,
    files: list[AgentFile],
    open_views: list[OpenView],
    max_open: int,
) -> Decision:
    """`open_views` oldest first. Every request must name an attached, processed file and
    a window inside it."""
    if len(requests) > max_open:
        raise Refused(
            f"Cannot open {len(requests)} files: exceeds configured maximum limit of"
            f" {max_open} files"
        )
    if not requests:
        raise Refused("No file requests provided")
    chosen: list[tuple[FileOpenRequest, AgentFile, int | None, int | None]] = []
    for request in requests:
        file = _find(request, files)
        if file.status != "completed":
            raise Refused(f"{file.name} is still being processed ({file.status}); try again soon")
        start, end = _window(request, file.name)
        if start is not None or end is not None:
            try:
                window(
                    units(file.text or "", file.strategy),
                    file.name,
                    file.strategy,
                    start,
                    end,
                    strict=True,
                )
            except BadWindow as exc:
                raise Refused(str(exc)) from exc
        chosen.append((request, file, start, end))

    state = list(open_views)
    wanted = {file.id for _, file, _, _ in chosen}
    by_others = [v for v in state if v.file_id not in wanted] if close_all_others else []
    state = [v for v in state if v not in by_others]
    evicted: list[OpenView] = []
    previous: dict[str, str] = {}
    for _, file, start, end in chosen:
        view = OpenView(file.id, file.name, start + 1 if start is not None else None, end)
        before = next((v for v in state if v.file_id == file.id), None)
        if before is not None and (before.start_line, before.end_line) != (
            view.start_line,
            view.end_line,
        ):
            previous[file.id] = _previously(before)
        others = [v for v in state if v.file_id != file.id]
        excess = len(others) - (max_open - 1)
        if excess > 0:
            evicted += others[:excess]
            others = others[excess:]
        state = [*others, view]

    opened = {v.file_id: v for v in state if v.file_id in wanted}
    summaries = [
        _described(request, file.name, previous.get(file.id, "")) for request, file, _, _ in chosen
    ]
    summary = (
        f"* Opened {summaries[0]}"
        if len(summaries) == 1
        else f"* Opened {len(summaries)} files: {', '.join(summaries)}"
    )
    if by_others:
        summary += (
            f"\nNote: Closed {len(by_others)} file(s) due to close_all_others=True:"
            f" {', '.join(v.file_name for v in by_others)}"
        )
    evicted = [v for v in evicted if v.file_id not in opened]
    if evicted:
        summary += (
            f"\nNote: Closed {len(evicted)} least recently used file(s) due to open file limit:"
            f" {', '.join(v.file_name for v in evicted)}"
        )
    return Decision(
        opened=[
            FileView(
                file_id=v.file_id,
                file_name=v.file_name,
                start_line=v.start_line,
                end_line=v.end_line,
            )
            for v in opened.values()
        ],
        closed=[*by_others, *evicted],
        summary=summary,
    )


def open_bulk(new: list[AgentFile], open_views: list[OpenView], max_open: int) -> Decision:
    """Open `new` (in order) whole; the most recently opened of the others stay open in
    the room left, the rest close (Letta's attach_files_bulk)."""
    names = list({f.id: f for f in new if f.status == "completed"}.values())
    if not names:
        return Decision(opened=[])
    ids = {f.id for f in names}
    still_open = [v for v in open_views if v.file_id not in ids]
    if len(names) >= max_open:
        opening, kept = names[:max_open], []
    else:
        room = max_open - len(names)
        opening, kept = names, still_open[len(still_open) - room :] if room else []
    closed = [v for v in still_open if v not in kept]
    return Decision(
        opened=[FileView(file_id=f.id, file_name=f.name) for f in opening],
        closed=closed,
        summary=f"* Opened {', '.join(f.name for f in opening)}",
    )

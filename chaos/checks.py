"""After the load: wait until no run is active, read what the API shows, and judge every request.

An acknowledged request must show up exactly once: its user message (by token) once in its
agent's messages, its assistant reply (`ok <token>`) once, and for a memory request its token
once in the agent's `human` block (and one `memory_insert` call). Anything missing is *lost*,
anything more than once *duplicated*. An unacknowledged request may have happened at most once
(more is duplicated); one that happened in part is reported as *partial*. No run may be left
`created`/`running` (*stuck*). A block's versions must be 1..n without gap or repeat, end at the
block's value, and since the load only ever appends, never drop a token an earlier version had.
An acknowledged upload must show up as one file `<token>.txt` in its folder, processed
(`completed`) into chunks of which one holds the token; a token in a file or chunk of a request
that uploaded none, or in another folder, is duplicated. An acknowledged import must show up as
one agent of its name, with the template's blocks and history. A proposal: see
chaos/evolution_checks.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from chaos import evolution_checks as evolution
from chaos.api import get_json, paginate
from chaos.blocklog import BlockEvent
from chaos.llm import ARCHIVAL_TOOL, ECHO_TOOL, MEMORY_LABEL, MEMORY_TOOL, TOKEN
from chaos.load import ACTIVE, Request

# The human block's value at creation: an event's text that holds it holds the whole value.
BLOCK_START = "chaos tokens:"
# A file still being processed (docs/folders.md).
PROCESSING = ("pending", "parsing", "embedding")


async def wait_quiet(
    http: httpx.AsyncClient, quiet_for: float = 3.0, timeout: float = 120.0
) -> tuple[list[dict[str, Any]], float]:
    """Wait until no run is created/running for `quiet_for` s (at most `timeout` s).

    Returns the runs still active at the end (empty when quiet) and the seconds waited.
    """
    loop = asyncio.get_running_loop()
    start = loop.time()
    quiet_since: float | None = None
    active: list[dict[str, Any]] = []
    while True:
        try:
            active = await get_json(http, "/v1/runs/", {"active": "true", "limit": 1000}, tries=3)
        except Exception:  # still recovering: not quiet
            quiet_since = None
        else:
            if active:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = loop.time()
            elif loop.time() - quiet_since >= quiet_for:
                return [], loop.time() - start
        if loop.time() - start > timeout:
            return active, loop.time() - start
        await asyncio.sleep(0.5)


@dataclass
class FolderView:
    folder_id: str
    files: list[dict[str, Any]]
    chunks: list[dict[str, Any]]  # its passages: the files' chunks

    @property
    def processing(self) -> list[dict[str, Any]]:
        return [f for f in self.files if f.get("processing_status") in PROCESSING]


async def read_folders(http: httpx.AsyncClient, folder_ids: list[str]) -> dict[str, FolderView]:
    views = {}
    for folder_id in folder_ids:
        files = await paginate(http, f"/v1/folders/{folder_id}/files")
        chunks = await paginate(http, f"/v1/folders/{folder_id}/passages")
        views[folder_id] = FolderView(folder_id, files, chunks)
    return views


async def wait_processed(
    http: httpx.AsyncClient, folder_ids: list[str], timeout: float = 120.0
) -> tuple[dict[str, FolderView], float]:
    """Wait until no file of the folders is still being processed (at most `timeout` s).

    Returns the folders as last read (a file still processing at the end is in them) and the
    seconds waited."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        views = await read_folders(http, folder_ids)
        if not any(v.processing for v in views.values()) or loop.time() - start > timeout:
            return views, loop.time() - start
        await asyncio.sleep(0.5)


@dataclass
class Imported:
    """An agent as an import made it, or the template it was exported from: what an import
    must carry over."""

    agent_id: str
    name: str
    blocks: dict[str, str]  # label -> value
    history: list[tuple[str, str]]  # (message type, content)


async def read_imported(http: httpx.AsyncClient, agent: dict[str, Any]) -> Imported:
    messages = await paginate(http, f"/v1/agents/{agent['id']}/messages", until_empty=True)
    return Imported(
        agent["id"],
        agent["name"],
        {b["label"]: b["value"] for b in agent.get("blocks") or []},
        # (The system message is rendered for each agent: its name, its time.)
        [
            (m["message_type"], str(m.get("content") or ""))
            for m in messages
            if m["message_type"] != "system_message"
        ],
    )


async def read_imports(http: httpx.AsyncClient, prefix: str) -> dict[str, list[Imported]]:
    """Every agent whose name starts with `prefix`, by name."""
    found: dict[str, list[Imported]] = defaultdict(list)
    for agent in await paginate(http, "/v1/agents/"):
        if str(agent.get("name") or "").startswith(prefix):
            found[agent["name"]].append(await read_imported(http, agent))
    return found


@dataclass
class AgentView:
    agent_id: str
    messages: list[dict[str, Any]]
    block: dict[str, Any]
    versions: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    # Its archival memory's passages.
    passages: list[dict[str, Any]] = field(default_factory=list)


async def read_agent(http: httpx.AsyncClient, agent_id: str) -> AgentView:
    messages = await paginate(http, f"/v1/agents/{agent_id}/messages", until_empty=True)
    block = await get_json(http, f"/v1/agents/{agent_id}/core-memory/blocks/{MEMORY_LABEL}")
    versions = await get_json(http, f"/v1/blocks/{block['id']}/versions")
    runs = await paginate(http, "/v1/runs/", {"agent_id": agent_id})
    passages = await paginate(http, f"/v1/agents/{agent_id}/archival-memory")
    return AgentView(agent_id, messages, block, versions, runs, passages)


async def read_all(http: httpx.AsyncClient, agent_ids: list[str]) -> dict[str, AgentView]:
    limit = asyncio.Semaphore(4)

    async def one(agent_id: str) -> AgentView:
        async with limit:
            return await read_agent(http, agent_id)

    views = await asyncio.gather(*(one(a) for a in agent_ids))
    return {v.agent_id: v for v in views}


@dataclass
class Finding:
    category: str  # lost | duplicated | partial | stuck | versions
    text: str  # one line: what is wrong
    request: Request | None = None
    window: tuple[float, float] | None = None  # on the load's clock, to match kills
    details: list[str] = field(default_factory=list)  # the evidence, a line each
    cause: str = ""  # the diagnosis, counted per category
    run_id: str | None = None  # a stuck run's


@dataclass
class Verdicts:
    lost: list[Finding] = field(default_factory=list)
    duplicated: list[Finding] = field(default_factory=list)
    partial: list[Finding] = field(default_factory=list)
    stuck: list[Finding] = field(default_factory=list)
    versions: list[Finding] = field(default_factory=list)
    lost_by_what: Counter[str] = field(default_factory=Counter)
    duplicated_by_what: Counter[str] = field(default_factory=Counter)
    acked_error_stop: int = 0  # acknowledged, but the answer's stop reason was not end_turn

    def causes(self, category: str) -> Counter[str]:
        findings: list[Finding] = getattr(self, category)
        return Counter(f.cause for f in findings if f.cause)


@dataclass
class _Seen:
    """Where a token shows up in the API's view."""

    user: list[tuple[str, str | None]] = field(default_factory=list)  # (message id, run id)
    reply: list[str | None] = field(default_factory=list)  # run ids
    calls: list[str | None] = field(default_factory=list)
    returns: list[tuple[str, str]] = field(default_factory=list)  # (status, text)
    passages: int = 0  # archival passages holding the token
    agents: set[str] = field(default_factory=set)
    files: list[dict[str, Any]] = field(default_factory=list)  # uploaded as <token>.txt
    chunks: list[str] = field(default_factory=list)  # the folders of the chunks holding it

    def processed(self) -> bool:
        """One file, completed, its token in one chunk: an upload as it should be."""
        return (
            len(self.files) == 1
            and self.files[0].get("processing_status") == "completed"
            and len(self.chunks) == 1
        )


def _index(
    views: dict[str, AgentView], folders: dict[str, FolderView] | None = None
) -> tuple[dict[str, _Seen], Counter[str]]:
    seen: dict[str, _Seen] = defaultdict(_Seen)
    in_blocks: Counter[str] = Counter()
    for folder in (folders or {}).values():
        for f in folder.files:
            for token in TOKEN.findall(str(f.get("original_file_name") or "")):
                seen[token].files.append(f)
        for chunk in folder.chunks:
            for token in TOKEN.findall(str(chunk.get("text") or "")):
                seen[token].chunks.append(str(chunk.get("source_id")))
    for view in views.values():
        for m in view.messages:
            kind = m.get("message_type")
            if kind == "user_message":
                for token in TOKEN.findall(str(m.get("content") or "")):
                    seen[token].user.append((m["id"], m.get("run_id")))
                    seen[token].agents.add(view.agent_id)
            elif kind == "assistant_message":
                content = str(m.get("content") or "")
                answered = TOKEN.search(content) if content.startswith("ok ") else None
                if answered is not None:  # ("ok <token>", " v<n>" from an evolved agent)
                    seen[answered.group(0)].reply.append(m.get("run_id"))
            elif kind == "tool_call_message":
                for call in m.get("tool_calls") or [m.get("tool_call") or {}]:
                    if call and call.get("name") in (MEMORY_TOOL, ECHO_TOOL, ARCHIVAL_TOOL):
                        for token in TOKEN.findall(str(call.get("arguments") or "")):
                            seen[token].calls.append(m.get("run_id"))
            elif kind == "tool_return_message":
                cid = str(m.get("tool_call_id") or "")
                if cid.startswith("call_"):
                    text = str(m.get("tool_return") or "")[:120]
                    seen[cid.removeprefix("call_")].returns.append((str(m.get("status")), text))
        in_blocks.update(TOKEN.findall(str(view.block.get("value") or "")))
        for passage in view.passages:
            if evolution.is_note(passage):
                continue  # (a decision's note: checked apart, evolution_checks.py)
            for token in TOKEN.findall(str(passage.get("text") or passage.get("content") or "")):
                seen[token].passages += 1
    return seen, in_blocks


def _token_in_log(log: list[BlockEvent], token: str) -> str:
    having = [e for e in log if token in e.text]
    if not having:
        return "in no event of the block's log"
    text = "in the log: " + ", ".join(e.describe() for e in having[:2])
    if len(having) > 2:
        text += f" (+{len(having) - 2} more)"
    same = [e for e in log if e.version == having[0].version and e.seq != having[0].seq]
    if same:
        text += "; another event for the same version: " + ", ".join(e.describe() for e in same)
    later = [
        e for e in log if e.seq > having[0].seq and BLOCK_START in e.text and token not in e.text
    ]
    if later:
        text += f"; a later whole value without it: {later[0].describe()}"
    return text


def _token_history(versions: list[dict[str, Any]], token: str) -> str:
    """In which versions of the block a token was, for a lost or doubled memory edit."""
    present = [v["version"] for v in versions if token in str(v.get("value") or "")]
    if not present:
        return "in no version of the block"
    first, last = present[0], present[-1]
    text = f"in block versions {first}..{last}" if first != last else f"in block version {first}"
    later = [v for v in versions if v["version"] > last]
    if later:
        gone = later[0]
        text += (
            f", gone from version {gone['version']} on (written by"
            f" {gone.get('actor') or '?'} {gone.get('tool_name') or ''}"
            f" at {gone.get('created_at')})"
        )
    doubled = [v["version"] for v in versions if str(v.get("value") or "").count(token) > 1]
    if doubled:
        text += f"; twice from version {doubled[0]}"
    return text


def evaluate(
    requests: list[Request],
    views: dict[str, AgentView],
    llm_stats: dict[str, int],
    wall_t0: float,
    logs: dict[str, list[BlockEvent]] | None = None,
    folders: dict[str, FolderView] | None = None,
    imports: dict[str, list[Imported]] | None = None,
    template: Imported | None = None,
    evolved: dict[str, evolution.EvolutionView] | None = None,
) -> Verdicts:
    """`logs`: each block's events from the log (by block id), for diagnoses, if read;
    `folders`: the agents' folders, with their files processed; `imports`: the agents
    imports made, by name, and the `template` they were imported from."""
    imports = imports or {}
    proposals = evolution.by_token(evolved or {})
    logs = logs or {}
    seen, in_blocks = _index(views, folders)
    out = Verdicts()
    for r in requests:
        s = seen.get(r.token, _Seen())
        u, a, c, b = len(s.user), len(s.reply), len(s.calls), in_blocks[r.token]
        missing: list[str] = []
        extra: list[str] = []
        made = imports.get(r.import_name or "", [])
        proposed = proposals.get(r.token, [])
        if not r.propose and proposed:
            extra.append("a proposal for a request that proposes none")
        rolled = evolution.rolled_back_by((evolved or {}).get(r.agent_id), r.token)
        if r.propose:
            missing += evolution.missing(proposed)
            if len(proposed) > 1:
                extra.append(f"proposal x{len(proposed)}")
            for p in proposed:
                extra += evolution.case_problems(p)
        elif r.rollback_to is not None:
            if not rolled:
                missing.append("the rollback")
            if len(rolled) > 1:
                extra.append(f"rollback x{len(rolled)}")
            chain = (evolved or {}).get(r.agent_id)
            if chain is not None and rolled:
                for problem in evolution.rollback_problems(chain, rolled, r.rollback_to):
                    found = Finding(problem.category, problem.text, r, cause=problem.cause)
                    out.versions.append(found)
        elif r.upload:
            missing += _upload_missing(s)
        elif r.imports:
            missing += _import_missing(made, template)
            if len(made) > 1:
                extra.append(f"imported agent x{len(made)}")
        else:
            if u == 0:
                missing.append("user message")
            if a == 0:
                missing.append("assistant reply")
            if s.files or s.chunks:
                extra.append("a file for a request that uploads none")
        if len(s.files) > 1:
            extra.append(f"file x{len(s.files)}")
        if len(s.chunks) > 1:
            extra.append(f"chunk x{len(s.chunks)}")
        if r.upload and any(f.get("source_id") != r.folder_id for f in s.files):
            extra.append(f"in folders {sorted({str(f.get('source_id')) for f in s.files})}")
        if r.memory and b == 0:
            missing.append("memory edit")
        if r.refused and c == 0:
            missing.append("the refused edit's call")
        if r.tool and c == 0:
            missing.append("the tool's call")
        elif r.tool and not _echoed(r, s):
            missing.append("the tool's result")
        if r.archive and c == 0:
            missing.append("the archival insert's call")
        elif r.archive and s.passages == 0:
            missing.append("the passage")
        if s.passages > 1:
            extra.append(f"passage x{s.passages}")
        if s.passages and not r.archive:
            extra.append("a passage for a request that inserts none")
        if u > 1:
            extra.append(f"user message x{u}")
        if a > 1:
            extra.append(f"assistant reply x{a}")
        if c > 1:
            extra.append(f"tool call x{c}")
        if len(s.returns) > 1:
            extra.append(f"tool result x{len(s.returns)}")
        if b > 1:
            extra.append(f"memory edit x{b} in the block")
        if not r.memory and b:
            extra.append("a memory edit for a plain or refused one")
        if not (r.memory or r.refused or r.tool or r.archive) and c:
            extra.append("a tool call for a plain message")
        if len(s.agents) > 1 or (s.agents and r.agent_id not in s.agents):
            extra.append(f"in agents {sorted(s.agents)}, sent to {r.agent_id}")
        if rolled and r.rollback_to is None:
            extra.append("a rollback for a request that asks none")
        if (r.upload or r.imports or r.propose or r.rollback_to) and (u or a or c or b):
            extra.append(f"a message for an {r.verb}")
        if r.acked and r.mode != "async" and r.stop_reason not in (None, "end_turn"):
            out.acked_error_stop += 1
        if not missing and not extra:
            continue
        view = views.get(r.agent_id)
        log = logs.get(str(view.block.get("id"))) if view is not None else None
        details = _evidence(r, s, u, a, c, b, llm_stats)
        if r.imports:
            details = [_imports_found(made, template), details[-1]]
        if r.propose:
            details = [evolution.described(proposed), details[-1]]
        if r.rollback_to is not None:
            details = [f"found: rollbacks {rolled or '-'}", details[-1]]
        if r.memory and view is not None and (b != 1 or "memory edit" in missing):
            details.append(f"block: token {_token_history(view.versions, r.token)}")
            if log is not None:
                details.append(f"log: {_token_in_log(log, r.token)}")
        window = (r.first_at, r.last_at)
        head = f"{r.kind} {r.token} to {r.agent_id}, " + (
            f"acknowledged at t={r.acked_at:.2f}s"
            if r.acked_at is not None
            else "not acknowledged" + (f" (rejected {r.rejected})" if r.rejected else "")
        )
        if extra:
            cause = _duplicate_cause(s, u, a, c, b, len(made), proposed)
            out.duplicated.append(
                Finding("duplicated", f"{head}: {', '.join(extra)}", r, window, details, cause)
            )
            for e in extra:
                out.duplicated_by_what[e.split(" x")[0]] += 1
        if missing:
            cause = _loss_cause(r, missing, c, s, log)
            if r.acked:
                text = f"{head}: missing {', '.join(missing)}"
                out.lost.append(Finding("lost", text, r, window, details, cause))
                for m in missing:
                    out.lost_by_what[m] += 1
            elif u or a or b or c or s.files or made or proposed or rolled:
                text = f"{head}: happened in part, missing {', '.join(missing)}"
                out.partial.append(Finding("partial", text, r, window, details, cause))
    by_run = {run_id: r for r in requests for run_id in r.run_ids}
    for view in views.values():
        for run in view.runs:
            if run.get("status") in ACTIVE:
                out.stuck.append(_stuck(run, by_run.get(run["id"]), requests, seen, wall_t0))
        out.versions += check_versions(view, logs.get(str(view.block.get("id"))))
    for chain in (evolved or {}).values():
        if chain.notes != chain.noted:
            doubled = chain.notes > chain.noted
            finding = Finding(
                "duplicated" if doubled else "lost",
                f"evolution notes of {chain.agent_id}: {chain.notes} in its archival memory"
                f" for {chain.noted} decisions that make one",
                cause="a decision's note " + ("written twice" if doubled else "never written"),
            )
            (out.duplicated if doubled else out.lost).append(finding)
        for problem in evolution.canary_problems(chain):
            found = Finding(problem.category, problem.text, cause=problem.cause)
            {"lost": out.lost, "duplicated": out.duplicated}.get(
                problem.category, out.versions
            ).append(found)
        if not chain.verified.get("ok"):
            out.versions.append(
                Finding(
                    "versions",
                    f"evolution chain of {chain.agent_id}: {chain.verified}",
                    cause="the evolution chain does not verify on the log",
                )
            )
    return out


def _import_missing(made: list[Imported], template: Imported | None) -> list[str]:
    if not made:
        return ["the imported agent"]
    if template is not None and any(m.blocks != template.blocks for m in made):
        return ["the imported blocks"]
    if template is not None and any(m.history != template.history for m in made):
        return ["the imported history"]
    return []


def _imports_found(made: list[Imported], template: Imported | None) -> str:
    agents = [
        f"{m.agent_id}: blocks {sorted(m.blocks)}, history of {len(m.history)}"
        + (" (the template's)" if template is not None and m.history == template.history else "")
        for m in made
    ]
    expected = f"{len(template.history)} messages" if template is not None else "?"
    return f"found: agents {agents or '-'}; the template's history: {expected}"


def _upload_missing(s: _Seen) -> list[str]:
    if not s.files:
        return ["the file"]
    if any(f.get("processing_status") != "completed" for f in s.files):
        return ["the file's processing"]
    return [] if s.chunks else ["the chunk holding the token"]


def _evidence(
    r: Request, s: _Seen, u: int, a: int, c: int, b: int, llm_stats: dict[str, int]
) -> list[str]:
    if r.upload:
        files = [
            f"{f.get('id')} {f.get('file_name')} in {f.get('source_id')}:"
            f" {f.get('processing_status')} {f.get('error_message') or ''}"
            f" chunks {f.get('chunks_embedded')}/{f.get('total_chunks')}"
            for f in s.files
        ]
        return [
            f"found: files {files or '-'}; chunks holding the token x{len(s.chunks)}",
            "attempts: " + "; ".join(at.describe() for at in r.attempts),
        ]
    runs = sorted({run for _, run in s.user if run} | {run for run in s.reply if run})
    asked_tool = llm_stats.get(f"{r.token} tool_call", 0)
    asked_text = llm_stats.get(f"{r.token} text", 0)
    answer = f"answer named runs {r.run_ids or '-'}"
    if r.stop_reason:
        answer += f", stop_reason {r.stop_reason}"
    if r.run_status:
        answer += f", run status when last polled {r.run_status}"
    lines = [
        f"found: user message x{u}, reply x{a}, tool call x{c}, token in block x{b};"
        f" runs in the history {runs or '-'}; {answer}",
        f"LLM: asked for the tool call x{asked_tool}, for the text answer x{asked_text}"
        + (
            " (more often than recorded: a step was asked again)"
            if 0 < c < asked_tool or 0 < a < asked_text
            else ""
        ),
    ]
    if s.returns:
        returns = Counter(s.returns)
        lines.append(
            "tool returns: "
            + ", ".join(f"{st} x{n} {t!r}" for (st, t), n in sorted(returns.items()))
        )
    lines.append("attempts: " + "; ".join(at.describe() for at in r.attempts))
    return lines


def _echoed(r: Request, s: _Seen) -> bool:
    """Whether a tool request's call returned its success (`echoed <token>`)."""
    return any(status == "success" and text == f"echoed {r.token}" for status, text in s.returns)


def _duplicate_cause(
    s: _Seen,
    u: int,
    a: int,
    c: int,
    b: int,
    made: int = 0,
    proposed: list[dict[str, Any]] | None = None,
) -> str:
    if proposed and u:
        return "a proposal holds the token of a message"
    if proposed and len(proposed) > 1:
        return "a retried proposal (same Idempotency-Key) made a second one"
    if proposed and any(evolution.case_problems(p) for p in proposed):
        return "an evaluation's case recorded twice, or skipped"
    if made > 1:
        return "a retried import (same Idempotency-Key) made a second agent"
    if len(s.files) > 1:
        return "a retried upload (duplicate_handling=skip) made a second file"
    if len(s.chunks) > 1:
        return "one file's chunk stored more than once"
    if (s.files or s.chunks) and u:
        return "a file or chunk holds the token of a request that uploaded none"
    runs = {run for _, run in s.user} | set(s.reply) | set(s.calls)
    if len(runs - {None}) > 1:
        return "a retry (same otid and Idempotency-Key) ran as a new run"
    if a > 1 or c > 1:
        return "one run's steps recorded again (its StartRun executed again)"
    if b > 1:
        return "one tool call, the memory edit applied more than once"
    if s.passages > 1:
        return "one archival insert stored more than one passage"
    if len(s.returns) > 1:
        return "one tool call, its result recorded more than once"
    return "other"


def _loss_cause(
    r: Request, missing: list[str], calls: int, s: _Seen, log: list[BlockEvent] | None
) -> str:
    if "the proposal" in missing:
        return "no proposal holds the token"
    if "the evaluation's end" in missing:
        return "the proposal is still being evaluated"
    if "the imported agent" in missing:
        return "no agent of the import's name"
    if "the imported blocks" in missing:
        return "the imported agent's blocks are not the template's"
    if "the imported history" in missing:
        return "the imported agent's history is not the template's"
    if "the file" in missing:
        return "no file of that name in any folder"
    if "the file's processing" in missing:
        states = sorted({str(f.get("processing_status")) for f in s.files})
        return f"the file's processing did not complete ({', '.join(states)})"
    if "the chunk holding the token" in missing:
        return "the file completed, but no chunk holds its token"
    if "user message" in missing:
        return "the message is not in the history"
    if "the refused edit's call" in missing:
        return "the run never called the memory tool"
    if "the tool's call" in missing:
        return "the run never called the users' tool"
    if "the archival insert's call" in missing:
        return "the run never called archival_memory_insert"
    if "the passage" in missing:
        got = "; ".join(f"{status}: {text}" for status, text in s.returns) or "none"
        return f"no passage holds the token (the insert's results: {got})"
    if "the tool's result" in missing:
        got = "; ".join(f"{status}: {text}" for status, text in s.returns) or "none"
        return f"the users' tool's result is not its success (results: {got})"
    if "memory edit" in missing:
        if not calls:
            return "the run never called the memory tool"
        if log is not None:
            having = [e for e in log if r.token in e.text]
            if not having:
                ok = any(status == "success" for status, _ in s.returns)
                return (
                    "the tool returned success, but no block event holds the edit"
                    if ok
                    else "the memory tool failed and nothing was recorded"
                )
            same = [e for e in log if e.version == having[0].version and e.seq != having[0].seq]
            if same:
                return (
                    "two BlockUpdated events for one version: the later one, decided on a"
                    " stale value, replaced the acknowledged edit"
                )
            later = [
                e
                for e in log
                if e.seq > having[0].seq and BLOCK_START in e.text and r.token not in e.text
            ]
            if later:
                return "a later version dropped it: an update decided on a stale value"
            return "in the log, but not in the projection"
        return "memory edit missing (the block's log was not read)"
    return "the run did not end with a reply"


def _stuck(
    run: dict[str, Any],
    request: Request | None,
    requests: list[Request],
    seen: dict[str, _Seen],
    wall_t0: float,
) -> Finding:
    created = run.get("created_at")
    at: float | None = None
    if isinstance(created, str):
        try:
            at = datetime.fromisoformat(created).timestamp() - wall_t0
        except ValueError:
            at = None
    when = f"created t={at:.2f}s" if at is not None else f"created {created}"
    text = (
        f"run {run['id']} of {run.get('agent_id')} left {run.get('status')}"
        f" (background={run.get('background')}, {when})"
    )
    details: list[str] = []
    if request is not None:
        details.append(f"the run of {request.kind} {request.token}, acknowledged")
        cause = "an acknowledged request's run never finished"
    else:
        tokens = [t for t, s in seen.items() if any(rid == run["id"] for _, rid in s.user)]
        failed = [
            (r, attempt)
            for r in requests
            if r.agent_id == run.get("agent_id") and r.mode == "async"
            for attempt in r.attempts
            if at is not None
            and (attempt.status is None or attempt.status >= 300)
            and attempt.start - 0.5 <= at <= attempt.end + 0.5
        ]
        if tokens:
            details.append(f"its user message carries {tokens}")
            cause = "a run with a message, never finished"
        elif failed:
            details += [
                f"made by the failed attempt of {r.kind} {r.token}: {attempt.describe()}"
                for r, attempt in failed[:3]
            ]
            cause = (
                "an async POST answered with an error after recording RunQueued: the run was"
                " never started (its StartRun was not sent or was lost) and no retry reuses it"
            )
        else:
            cause = "no request's answer named it and no failed attempt matches"
    window = (at, at) if at is not None else None
    return Finding("stuck", text, request, window, details, cause, run_id=run["id"])


def check_versions(view: AgentView, log: list[BlockEvent] | None = None) -> list[Finding]:
    out: list[Finding] = []
    block = view.block
    numbers = [int(v["version"]) for v in view.versions]
    repeats = sorted(n for n, k in Counter(numbers).items() if k > 1)
    gaps = sorted(set(range(1, max(numbers, default=0) + 1)) - set(numbers))
    name = f"block {block.get('id')} ({MEMORY_LABEL} of {view.agent_id})"
    if log is not None:
        by_version: dict[int, list[BlockEvent]] = defaultdict(list)
        for event in log:
            if event.version is not None:
                by_version[event.version].append(event)
        for version, events in sorted(by_version.items()):
            if len(events) > 1:
                out.append(
                    Finding(
                        "versions",
                        f"{name}: the log holds {len(events)} events for version {version}: "
                        + "; ".join(e.describe() for e in events)
                        + " (the API lists one; a rebuild may pick another)",
                        cause="two events in the log for one version",
                    )
                )
    if repeats or gaps or numbers != sorted(numbers) or (numbers and numbers[0] != 1):
        out.append(
            Finding(
                "versions",
                f"{name}: versions not 1..n: repeated {repeats or '-'}, missing {gaps or '-'}",
                cause="versions listed are not 1..n",
            )
        )
    if view.versions:
        last = view.versions[-1]
        if last.get("value") != block.get("value"):
            out.append(
                Finding(
                    "versions",
                    f"{name}: value differs from its last version {last['version']}",
                    cause="the block's value is not its last version's",
                )
            )
        if block.get("version") not in (None, last["version"]):
            out.append(
                Finding(
                    "versions",
                    f"{name}: block says version {block.get('version')},"
                    f" its last listed version is {last['version']}",
                    cause="the block's version is not its last listed one",
                )
            )
    previous: Counter[str] = Counter()
    previous_number: object = "-"
    for v in view.versions:
        tokens = Counter(TOKEN.findall(str(v.get("value") or "")))
        dropped = sorted((previous - tokens).keys())
        if dropped:
            shown = ", ".join(dropped[:5]) + (f" (+{len(dropped) - 5})" if len(dropped) > 5 else "")
            out.append(
                Finding(
                    "versions",
                    f"{name}: version {v['version']} ({v.get('actor')} {v.get('tool_name') or ''},"
                    f" {v.get('created_at')}) dropped {shown} that version {previous_number}"
                    " had",
                    cause="a version dropped tokens an earlier one had (decided on a stale value)",
                )
            )
        previous, previous_number = tokens, v["version"]
    return out


def after_rebuild(
    verdicts: Verdicts,
    views: dict[str, AgentView],
    folders: dict[str, FolderView] | None = None,
    live_before: dict[str, str] | None = None,
) -> None:
    """What the API shows once every projection is rebuilt from the log, added to each finding:
    a loss or a stuck run that the rebuild repairs is the live projection's, not the log's.

    `live_before` is each run's status as the live projection showed it just before the
    rebuild: a run the checks found active but that had ended by then was late, not lost."""
    seen, in_blocks = _index(views, folders)
    runs = {run["id"]: run for view in views.values() for run in view.runs}
    for f in [*verdicts.lost, *verdicts.duplicated, *verdicts.partial]:
        r = f.request
        if r is None:
            continue
        s = seen.get(r.token, _Seen())
        u, a, c, b = len(s.user), len(s.reply), len(s.calls), in_blocks[r.token]
        f.details.append(
            f"after the rebuild: user message x{u}, reply x{a}, tool call x{c}, token in block x{b}"
            + (f", file x{len(s.files)}, chunk x{len(s.chunks)}" if r.upload else "")
        )
        if r.imports or r.propose:
            continue
        if r.upload:
            if f.category == "lost" and s.processed():
                f.cause = "the live projection lost it (the log has it: a rebuild shows it once)"
            continue
        whole = u == 1 and a == 1 and (b == 1 if r.memory else b == 0)
        whole = whole and (_echoed(r, s) if r.tool else True)
        whole = whole and s.passages == (1 if r.archive else 0)
        if f.category == "lost" and whole:
            f.cause = (
                "the live projection lost it (the log has it: a rebuild shows it exactly once)"
                + (f"; {f.cause}" if f.cause.startswith("two BlockUpdated") else "")
            )
    for f in verdicts.stuck:
        run = runs.get(f.run_id or "")
        status = run.get("status") if run else "absent"
        f.details.append(f"after the rebuild: {status}")
        live = (live_before or {}).get(f.run_id or "")
        if live is not None and live not in ACTIVE:
            f.details.append(f"live, just before the rebuild: {live}")
            f.cause = (
                "the run ended late: still active when the checks read it (after the quiet"
                f" window), {live} just before the rebuild"
            )
        elif status not in ACTIVE and run is not None:
            f.cause = (
                f"the live runs projection lost the run's end (the log has it: a rebuild shows"
                f" it {status})"
            )

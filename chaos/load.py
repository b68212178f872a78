"""Sustained load: concurrent clients sending messages with unique tokens, retrying as a careful
client would, and a record of every request and every attempt.

Each request is one user message, `say <token>` (plain), `remember <token>` (the scripted LLM
answers with a memory edit), `misfile <token>` (an edit of a block the agent lacks, refused) or
`compute <token>` (a call of a users' tool, run in the sandbox) or `archive <token>` (an
archival memory insert),
sent to `POST /v1/agents/{id}/messages` or, for a share of them,
`POST /v1/agents/{id}/messages/async` (then the run is polled until it ends). A failed attempt
(connection error, timeout, 5xx, 409, 429) is retried with the same idempotency key: the
message's `otid` and the `Idempotency-Key` header. An `upload` request is no message: a file
`<token>.txt` holding the token, uploaded to the agent's folder with
`duplicate_handling=skip` (Letta's way to make an upload safe to send again: a retry finds
the file the first attempt made). An `import` request is no message either: the template
agent's file (`.af`, exported at the start) imported as a new agent `chaos-import-<token>`,
retried with the same `Idempotency-Key`. A `propose` request posts a proposal to change the
agent (its token appended to its persona; chaos/evolution_checks.py) with an
`Idempotency-Key`, evaluated in the shadow while the system is killed. For an agent that
evolves in mode auto, one such request in three (by its token) rolls the agent back instead,
to the parent of the version it serves (the one served before: a rollback's parent undoes
it), its token in the reason, with an `Idempotency-Key`; a request for an agent that serves
no version yet proposes. A request is
acknowledged when an attempt got a 2xx; one that got another 4xx is given up (rejected);
retries stop `retry_grace` seconds after the load ends.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import httpx

from chaos.evolution_checks import proposal_body
from chaos.llm import token_for

RETRYABLE_4XX = frozenset({408, 409, 425, 429})
Mode = Literal["sync", "async", "stream", "schedule"]
# How far ahead a scheduled request's one-shot fires.
SCHEDULED_AHEAD = 3.0
# The names of the agents the imports make: the prefix, then the request's token.
IMPORT_PREFIX = "chaos-import-"


class StreamCut(httpx.TransportError):
    """A streamed answer that ended before its `[DONE]` (a killed gateway, a dropped run)."""

    def __init__(self, request: httpx.Request) -> None:
        super().__init__("the stream ended before [DONE]", request=request)


ACTIVE = ("created", "running")


class Clock:
    """Seconds since the load started (kills and attempts share it)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.t0


@dataclass
class Attempt:
    start: float
    end: float
    status: int | None  # None: no HTTP answer
    error: str | None = None  # transport error, or the start of a non-2xx body
    plain_text: bool = False  # a 5xx whose body is not JSON

    def describe(self) -> str:
        what = str(self.status) if self.status is not None else (self.error or "?")
        if self.status is not None and self.status >= 300 and self.error:
            what += f" {self.error[:80]!r}"
        return f"t={self.start:.2f}-{self.end:.2f}s {what}"


@dataclass
class Request:
    token: str
    agent_id: str
    memory: bool
    # sync: answered when the run ends; async: a run to poll; stream: its events as SSE
    # (acknowledged once the stream ends with `[DONE]`; one cut before it is retried);
    # schedule: a one-shot schedule of the message a few seconds ahead (acknowledged when
    # made; then its fire's run is followed until it ends).
    mode: Mode
    client: int
    otid: str
    key: str
    attempts: list[Attempt] = field(default_factory=list)
    acked_at: float | None = None
    rejected: int | None = None  # the 4xx that ended it
    run_ids: list[str] = field(default_factory=list)  # from the acknowledging answer
    stop_reason: str | None = None  # a sync answer's
    run_status: str | None = None  # the async run's, as last polled
    # A memory edit the memory service refuses (its block does not exist): one tool call,
    # its error returned, nothing in the block.
    refused: bool = False
    # A call of the agents' users' tool (chaos_echo), run in the sandbox: one call, its
    # result `echoed <token>`.
    tool: bool = False
    # An archival memory insert of the token: one passage holding it.
    archive: bool = False
    # A file holding the token uploaded to this folder (the agent's): one file, processed
    # into chunks, one of them holding the token.
    folder_id: str | None = None
    # The name of the agent an import of the template's agent file makes.
    import_name: str | None = None
    # A proposal to change the agent, its token in the patch and the rationale.
    propose: bool = False
    # A rollback of the agent to this version, its token in the reason.
    rollback_to: str | None = None
    # Sent to the agent's conversation (its own subject, run queue and history) instead of
    # its default one; always answered in the request (Letta has no async conversation route).
    conversation_id: str | None = None
    # A scheduled request's schedule, and when it fires (the same in every attempt).
    schedule_id: str | None = None
    at: str | None = None

    @property
    def acked(self) -> bool:
        return self.acked_at is not None

    @property
    def text(self) -> str:
        return f"{self.verb} {self.token}"

    @property
    def upload(self) -> bool:
        return self.folder_id is not None

    @property
    def imports(self) -> bool:
        return self.import_name is not None

    @property
    def file_name(self) -> str:
        return f"{self.token}.txt"

    @property
    def verb(self) -> str:
        if self.upload:
            return "upload"
        if self.imports:
            return "import"
        if self.propose:
            return "propose"
        if self.rollback_to is not None:
            return "rollback"
        if self.memory:
            return "remember"
        if self.refused:
            return "misfile"
        return "compute" if self.tool else "archive" if self.archive else "say"

    @property
    def kind(self) -> str:
        names = {
            "remember": "memory",
            "misfile": "refused",
            "compute": "tool",
            "archive": "archival",
            "upload": "upload",
            "import": "import",
            "propose": "proposal",
            "rollback": "rollback",
            "say": "plain",
        }
        where = " in a conversation" if self.conversation_id else ""
        return f"{self.mode} {names[self.verb]}{where}"

    @property
    def first_at(self) -> float:
        return self.attempts[0].start if self.attempts else 0.0

    @property
    def last_at(self) -> float:
        return self.attempts[-1].end if self.attempts else 0.0


def _share(default: float, what: str) -> Any:
    return field(default=default, metadata={"help": what})


@dataclass(frozen=True)
class Shares:
    """What share of the requests is of each kind (`--<name>-share`). The first seven divide
    one draw (the rest of it are plain messages); the others are drawn apart."""

    memory: float = _share(0.5, "whose answer edits the memory block")
    refused: float = _share(0.05, "whose answer edits a block the agent lacks (refused)")
    tool: float = _share(0.1, "whose answer calls a users' tool (run in the sandbox)")
    archive: float = _share(0.1, "whose answer inserts a passage into archival memory")
    upload: float = _share(0.05, "uploading a file to the agent's folder (no message)")
    import_: float = _share(0.02, "importing the template's agent file as a new agent")
    propose: float = _share(0.02, "proposing a change to the agent (evaluated in the shadow)")
    conversation: float = _share(0.2, "sent to the agent's conversation besides its default one")
    stream: float = _share(0.2, "streamed (SSE; a stream cut before [DONE] is retried)")
    async_: float = _share(0.3, "sent to /messages/async (then the run is polled)")
    schedule: float = _share(0.05, "scheduled a few seconds ahead (the fire's run followed)")

    def kind(self, draw: float) -> str:
        """The kind a draw in [0, 1) makes: memory, refused, tool, archive, upload, import_,
        propose or plain."""
        for name in ("memory", "refused", "tool", "archive", "upload", "import_", "propose"):
            share: float = getattr(self, name)
            if draw < share:
                return name
            draw -= share
        return "plain"


@dataclass
class LoadSettings:
    seed: int
    duration: float
    clients: int
    shares: Shares = field(default_factory=Shares)
    request_timeout: float = 60.0
    retry_grace: float = 60.0
    poll_timeout: float = 60.0


class Load:
    def __init__(
        self,
        http: httpx.AsyncClient,
        agent_ids: list[str],
        settings: LoadSettings,
        clock: Clock,
        conversations: dict[str, str] | None = None,
        folders: dict[str, str] | None = None,
        template: str | None = None,
        evolving: bool = False,
        rolling_back: frozenset[str] = frozenset(),
    ) -> None:
        self.http = http
        self.agent_ids = agent_ids
        # Each agent's conversation besides its default one (agent id -> conversation id).
        self.conversations = conversations or {}
        # Each agent's folder, attached to it (agent id -> folder id).
        self.folders = folders or {}
        # The template agent's file, for the imports.
        self.template = template
        # Whether the agents' evolution is on (the `propose` requests need it).
        self.evolving = evolving
        # The agents some of whose `propose` requests roll them back instead (mode auto).
        self.rolling_back = rolling_back
        self.s = settings
        self.clock = clock
        self.requests: list[Request] = []
        self.statuses: Counter[str] = Counter()  # every attempt's outcome
        self.successes: list[float] = []  # when each acknowledging attempt ended
        self.ack_starts: list[float] = []  # when each acknowledging attempt started
        self.ended_at: float | None = None

    async def run(self) -> None:
        await asyncio.gather(*(self._client(i) for i in range(self.s.clients)))
        self.ended_at = self.clock()

    def acked_since(self, t: float) -> bool:
        """Whether a request sent (its acknowledged attempt started) after `t` was acknowledged."""
        return any(s > t for s in self.ack_starts[-64:])

    async def _client(self, index: int) -> None:
        rng = random.Random(f"chaos-load-{self.s.seed}-{index}")
        number = 0
        while self.clock() < self.s.duration:
            number += 1
            agent_id = rng.choice(self.agent_ids)
            # (One draw for the kind: a seed's memory edits stay those it always made.)
            kind = self.s.shares.kind(rng.random())
            request = Request(
                token=token_for(index, number),
                agent_id=agent_id,
                memory=kind == "memory",
                refused=kind == "refused",
                tool=kind == "tool",
                archive=kind == "archive",
                mode=self._mode(rng.random()),
                client=index,
                otid=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                key=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            )
            if agent_id in self.conversations and rng.random() < self.s.shares.conversation:
                request.conversation_id = self.conversations[agent_id]
                if request.mode in ("async", "schedule"):
                    request.mode = "sync"
            if kind == "upload" and agent_id in self.folders:
                # (No message: answered when the upload is recorded, in any mode.)
                request.folder_id = self.folders[agent_id]
                request.mode, request.conversation_id = "sync", None
            if kind == "propose" and self.evolving:
                request.propose = True
                request.mode, request.conversation_id = "sync", None
                if agent_id in self.rolling_back and rolls_back(request.token):
                    request.rollback_to = await self._rollback_target(agent_id)
                    request.propose = request.rollback_to is None
            if kind == "import_" and self.template is not None:
                request.import_name = IMPORT_PREFIX + request.token
                request.mode, request.conversation_id = "sync", None
            if request.mode == "schedule":
                ahead = datetime.now(UTC) + timedelta(seconds=SCHEDULED_AHEAD)
                request.at = ahead.isoformat()
            self.requests.append(request)
            await self._send(request, rng)
            if request.acked and request.mode == "schedule" and request.schedule_id:
                await self._fired(request)
            if request.acked and request.mode in ("async", "schedule") and request.run_ids:
                await self._poll(request)

    async def _rollback_target(self, agent_id: str) -> str | None:
        """The parent of the version the agent serves (None: none served, or not read)."""
        try:
            response = await self.http.get(
                f"/v1/agents/{agent_id}/evolution/versions", timeout=self.s.request_timeout
            )
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        listed = response.json()
        serving = listed.get("serving")
        for version in listed.get("versions") or []:
            if version.get("version_id") == serving:
                parent = version.get("parent_id")
                return str(parent) if parent else None
        return None

    def _mode(self, draw: float) -> Mode:
        # (One draw: a seed's async requests stay those it always sent.)
        shares = self.s.shares
        if draw < shares.async_:
            return "async"
        draw -= shares.async_
        if draw < shares.stream:
            return "stream"
        return "schedule" if draw - shares.stream < shares.schedule else "sync"

    async def _send(self, request: Request, rng: random.Random) -> None:
        path = f"/v1/agents/{request.agent_id}/messages"
        if request.mode != "sync":
            path += f"/{request.mode}"
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": request.text, "otid": request.otid}]
        }
        if request.conversation_id is not None:
            path = f"/v1/conversations/{request.conversation_id}/messages"
            body["streaming"] = request.mode == "stream"
        if request.mode == "schedule":
            path = f"/v1/agents/{request.agent_id}/schedules"
            body = {"at": request.at, "input": request.text}
        headers = {"Idempotency-Key": request.key}
        if request.upload:
            path = f"/v1/folders/{request.folder_id}/upload?duplicate_handling=skip"
        if request.imports:
            path = "/v1/agents/import"
        if request.propose:
            path = f"/v1/agents/{request.agent_id}/evolution/proposals"
            body = proposal_body(request.token)
        if request.rollback_to is not None:
            path = f"/v1/agents/{request.agent_id}/evolution/rollback"
            body = {"version_id": request.rollback_to, "reason": rollback_reason(request.token)}
        give_up = self.s.duration + self.s.retry_grace
        backoff = 0.2
        while True:
            start = self.clock()
            try:
                if request.mode == "stream":
                    response = await self._streamed(path, body, headers)
                elif request.upload:
                    text = file_text(request.token)
                    response = await self.http.post(
                        path,
                        files={"file": (request.file_name, text, "text/plain")},
                        headers=headers,
                        timeout=self.s.request_timeout,
                    )
                elif request.imports:
                    assert self.template is not None
                    response = await self.http.post(
                        path,
                        files={"file": ("template.af", self.template, "application/json")},
                        data={"name": request.import_name},
                        headers=headers,
                        timeout=self.s.request_timeout,
                    )
                else:
                    response = await self.http.post(
                        path, json=body, headers=headers, timeout=self.s.request_timeout
                    )
            except httpx.TimeoutException:
                request.attempts.append(Attempt(start, self.clock(), None, "timeout"))
                self.statuses["timeout"] += 1
            except httpx.TransportError as exc:
                request.attempts.append(Attempt(start, self.clock(), None, type(exc).__name__))
                self.statuses[type(exc).__name__] += 1
            else:
                end = self.clock()
                status = response.status_code
                self.statuses[str(status)] += 1
                if 200 <= status < 300:
                    request.attempts.append(Attempt(start, end, status))
                    request.acked_at = end
                    self.successes.append(end)
                    self.ack_starts.append(start)
                    self._read_answer(request, response)
                    return
                plain = status >= 500 and not _is_json(response)
                if plain:
                    self.statuses[f"{status} plain-text"] += 1
                request.attempts.append(Attempt(start, end, status, response.text[:200], plain))
                if status < 500 and status not in RETRYABLE_4XX:
                    request.rejected = status
                    return
            if self.clock() > give_up:
                return
            await asyncio.sleep(backoff * rng.uniform(0.5, 1.5))
            backoff = min(backoff * 2, 2.0)

    async def _streamed(
        self, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> httpx.Response:
        """A streamed request's answer, read to its end: a 200 whose body is the answer its
        events add up to (`messages`, `stop_reason`), as a sync request's is. Raises
        StreamCut when the stream ends before `[DONE]`."""
        async with self.http.stream(
            "POST", path, json=body, headers=headers, timeout=self.s.request_timeout
        ) as response:
            if response.status_code != 200:
                await response.aread()
                return response
            messages: list[dict[str, Any]] = []
            stop: Any = None
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    answer = {"messages": messages, "stop_reason": stop}
                    return httpx.Response(200, json=answer, request=response.request)
                event = json.loads(line[6:])
                if event.get("message_type") == "stop_reason":
                    stop = event
                elif event.get("message_type"):
                    messages.append(event)
            raise StreamCut(response.request)

    def _read_answer(self, request: Request, response: httpx.Response) -> None:
        try:
            data: Any = response.json()
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        if request.mode == "async":
            if isinstance(data.get("id"), str):
                request.run_ids = [data["id"]]
            request.run_status = data.get("status")
            return
        if request.mode == "schedule":
            if isinstance(data.get("id"), str):
                request.schedule_id = data["id"]
            return
        runs = {m.get("run_id") for m in data.get("messages") or [] if isinstance(m, dict)}
        request.run_ids = sorted(r for r in runs if isinstance(r, str))
        reason = data.get("stop_reason")
        if isinstance(reason, dict):
            request.stop_reason = reason.get("stop_reason")

    async def _fired(self, request: Request) -> None:
        """Wait for the schedule's fire; its run becomes the request's."""
        path = f"/v1/agents/{request.agent_id}/schedules/{request.schedule_id}/fires"
        deadline = self.clock() + SCHEDULED_AHEAD + self.s.poll_timeout
        while self.clock() < deadline:
            await asyncio.sleep(0.5)
            try:
                response = await self.http.get(path, timeout=10)
            except httpx.HTTPError:
                continue
            fires = response.json() if response.status_code == 200 else []
            runs = [f["run_id"] for f in fires if isinstance(f, dict) and f.get("run_id")]
            if runs:
                request.run_ids = runs
                return

    async def _poll(self, request: Request) -> None:
        deadline = self.clock() + self.s.poll_timeout
        while self.clock() < deadline:
            await asyncio.sleep(0.5)
            try:
                response = await self.http.get(f"/v1/runs/{request.run_ids[0]}", timeout=10)
            except httpx.HTTPError:
                continue
            if response.status_code == 200:
                request.run_status = response.json().get("status")
                if request.run_status not in ACTIVE:
                    return


def rolls_back(token: str) -> bool:
    """Whether a `propose` request for an agent in mode auto rolls it back instead: one in
    three, by its token (no draw: a seed's requests stay those it always made)."""
    return int(hashlib.sha256(token.encode()).hexdigest(), 16) % 3 == 0


def rollback_reason(token: str) -> str:
    return f"chaos rollback {token}"


def file_text(token: str) -> str:
    """An uploaded file's text: short enough to be one chunk, the token in it once."""
    return f"A file the chaos suite uploaded.\nIts token is {token}.\n"


def _is_json(response: httpx.Response) -> bool:
    try:
        response.json()
    except ValueError:
        return False
    return True

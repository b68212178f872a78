"""The chaos suite's LLM: an OpenAI-protocol server whose answer is a pure function of the request.

A retried or resumed run therefore gets the same answer as the first attempt did, and any
difference in what the system recorded is the system's doing. The script:

- the last user message says `remember <token>` and the conversation after it holds no tool
  result for the call `call_<token>`: a tool call `memory_insert(label="human",
  new_string="<token>", insert_line=-1)` (the tool `letta_v1_agent` gets by default);
  `misfile <token>`: the same call into a block the agent does not have (`nowhere`), which
  the memory service refuses (a refused edit in doubt after a crash has its own recovery);
  `compute <token>`: a call of the users' tool `chaos_echo(text="<token>")`, run in the
  sandbox (declared idempotent: one whose sandbox died mid-call runs once more);
  `archive <token>`: `archival_memory_insert(content="<token>")` (embedded and stored by the
  memory service);
- otherwise (`say <token>`, or the tool result is there): the text `ok <token>`, followed
  by ` v<n>` when the system prompt holds n evolution marks (`[evolved <token>]`, the text a
  `propose` request's patch appends to the persona): an evolved agent answers visibly so;
- the summarizer's request (its system prompt): the text `summary`;
- the evolution judge's request (its rubric as the system prompt): the answer with more
  evolution marks is preferred (`A` or `B`), equal ones tie. So a proposal wins each case
  it is judged on, a canary's candidate each sample, and the gate and the canary go all
  the way to a promotion where the agent's mode lets them.

`POST /v1/chat/completions`, non-streaming and streaming (`"stream": true`, SSE chunks with
usage), answered from an asyncio protocol with httptools, in a process of its own
(`python -m chaos.llm --port N`). `GET /stats` tells how often each token was answered, by kind
(`tool_call` / `text`): a count above one means the system asked the LLM again for a step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import time
from collections import Counter
from typing import Any

import httptools

TOKEN = re.compile(r"T\d{3}n\d{6}")
MEMORY_TOOL = "memory_insert"
MEMORY_LABEL = "human"
MISSING_LABEL = "nowhere"
ECHO_TOOL = "chaos_echo"
ARCHIVAL_TOOL = "archival_memory_insert"
# The users' tool the agents have (run in the sandbox): its result names the token.
ECHO_SOURCE = (
    "def chaos_echo(text: str) -> str:\n"
    '    """Echo the text back.\n\n'
    "    Args:\n"
    "        text: what to echo\n"
    '    """\n'
    '    return "echoed " + text\n'
)
SUMMARIZER_MARK = "You summarize the earlier part of a conversation"
JUDGE_MARK = "You compare two answers"
# What a `propose` request's patch appends to the agent's persona (chaos/evolution_checks.py).
EVOLVED = re.compile(r"\[evolved (T\d{3}n\d{6})\]")
_VERSION = re.compile(r" v(\d+)$")


def evolved_mark(token: str) -> str:
    return f"[evolved {token}]"


def token_for(client: int, number: int) -> str:
    """Fixed width, so no token is a prefix or substring of another."""
    return f"T{client:03d}n{number:06d}"


def call_id(token: str) -> str:
    return f"call_{token}"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message for a chat-completions request (pure: same request, same answer)."""
    messages: list[dict[str, Any]] = list(body.get("messages") or [])
    system = ""
    if messages and messages[0].get("role") == "system":
        system = _text(messages[0].get("content"))
        if system.startswith(SUMMARIZER_MARK):
            return {"role": "assistant", "content": "summary"}
        if system.startswith(JUDGE_MARK):
            return {"role": "assistant", "content": _verdict(_text(messages[-1].get("content")))}
    last_user = next(
        (
            i
            for i in range(len(messages) - 1, -1, -1)
            if messages[i].get("role") == "user" and TOKEN.search(_text(messages[i].get("content")))
        ),
        None,
    )
    if last_user is None:
        return {"role": "assistant", "content": "ok"}
    text = _text(messages[last_user].get("content"))
    found = TOKEN.search(text)
    assert found is not None
    token = found.group(0)
    if text.startswith(("remember ", "misfile ", "compute ", "archive ")):
        cid = call_id(token)
        answered = any(
            m.get("role") == "tool" and m.get("tool_call_id") == cid
            for m in messages[last_user + 1 :]
        )
        if not answered:
            name, arguments = _call_for(text, token)
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                ],
            }
    marks = len(EVOLVED.findall(system))
    return {"role": "assistant", "content": f"ok {token}" + (f" v{marks}" if marks else "")}


def _verdict(prompt: str) -> str:
    """The judge's answer to o_evolution/judge.py's prompt: the more evolved answer."""
    try:
        a, rest = prompt.split("Answer A:\n", 1)[1].split("\n\nAnswer B:\n", 1)
        b = rest.split("\n\nWhich answer", 1)[0]
    except (IndexError, ValueError):
        return "tie"

    def version(answer: str) -> int:
        found = _VERSION.search(answer.strip())
        return int(found.group(1)) if found else 0

    va, vb = version(a), version(b)
    return "A" if va > vb else "B" if vb > va else "tie"


def _call_for(text: str, token: str) -> tuple[str, dict[str, Any]]:
    if text.startswith("compute "):
        return ECHO_TOOL, {"text": token}
    if text.startswith("archive "):
        return ARCHIVAL_TOOL, {"content": token}
    label = MEMORY_LABEL if text.startswith("remember ") else MISSING_LABEL
    return MEMORY_TOOL, {"label": label, "new_string": token, "insert_line": -1}


def kind_of(message: dict[str, Any]) -> tuple[str | None, str]:
    """(token, "tool_call" | "text") for the statistics."""
    if message.get("tool_calls"):
        cid: str = message["tool_calls"][0]["id"]
        return cid.removeprefix("call_"), "tool_call"
    found = TOKEN.search(message.get("content") or "")
    return (found.group(0) if found else None), "text"


_USAGE = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}


def completion(message: dict[str, Any], model: str) -> bytes:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return json.dumps(
        {
            "id": "chatcmpl-chaos",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": _USAGE,
        }
    ).encode()


def stream_chunks(message: dict[str, Any], model: str) -> bytes:
    """The same answer as SSE chunks: text in two pieces, a tool call's arguments in two."""
    base = {"id": "chatcmpl-chaos", "object": "chat.completion.chunk", "model": model}
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> bytes:
        choices = [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]
        data = {**base, "created": created, "choices": choices, "usage": usage}
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    calls = message.get("tool_calls") or []
    for i, call in enumerate(calls):
        args = call["function"]["arguments"]
        half = len(args) // 2
        first = {"index": i, "id": call["id"], "type": "function"}
        out.append(
            chunk({"tool_calls": [first | {"function": {"name": call["function"]["name"]}}]})
        )
        for piece in (args[:half], args[half:]):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    content = message.get("content") or ""
    if content:
        half = len(content) // 2
        out += [chunk({"content": content[:half]}), chunk({"content": content[half:]})]
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    out.append(chunk({}, usage=_USAGE))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


class _Connection(asyncio.Protocol):
    """HTTP/1.1 keep-alive; requests on one connection are answered in order."""

    def __init__(self, stats: Counter[str]) -> None:
        self.stats = stats
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Without it every answer waits for the client's delayed ACK (~40 ms).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        path = self.url.split(b"?")[0].rstrip(b"/")
        body, self.url, self.body = b"".join(self.body), b"", []
        content_type = b"application/json"
        if path.endswith(b"/chat/completions"):
            status, payload, content_type = self.chat(body)
        elif path == b"/stats":
            status, payload = 200, json.dumps(dict(self.stats)).encode()
        else:
            status, payload = 404, b'{"error": {"message": "not found"}}'
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
            % (status, b"OK" if status == 200 else b"Error", content_type, len(payload))
            + payload
        )

    def chat(self, body: bytes) -> tuple[int, bytes, bytes]:
        try:
            request = json.loads(body)
        except ValueError:
            return 400, b'{"error": {"message": "the body is not JSON"}}', b"application/json"
        message = answer(request)
        token, kind = kind_of(message)
        if token is not None:
            self.stats[f"{token} {kind}"] += 1
        model = str(request.get("model", "chaos"))
        if request.get("stream"):
            return 200, stream_chunks(message, model), b"text/event-stream"
        return 200, completion(message, model), b"application/json"


async def serve(port: int) -> None:
    stats: Counter[str] = Counter()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Connection(stats), "127.0.0.1", port)
    print(f"chaos llm listening on 127.0.0.1:{port}", flush=True)
    await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description="the chaos suite's scripted LLM")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()

"""Does a run cost more as its conversation grows? Time per block of messages, 0 to N.

One agent, N messages sent one after another, each a 1-step run. The agent's
context window is small (--window tokens) and the LLM stand-in reports
realistic prompt tokens (about 4 bytes of request per token), so the executor
summarizes older turns as a real one would, and the context stays bounded:
what remains is whatever in O grows with the whole conversation (every
message ever exchanged stays in the history, searchable). For each block of
--block messages it prints the wall time, the median and p99 of the gateway's
time per message (Server-Timing), and how many summaries were made.

    python -m bench.history_growth [--messages 10000] [--block 1000] [--window 8000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

from bench.agent_loop import percentile, server_ms  # noqa: E402
from bench.local_system import local_system  # noqa: E402
from bench.zero_latency_llm import ZeroLatencyLLM  # noqa: E402

SUMMARY = "The user sent numbered messages about the weather and the agent acknowledged each."


def scripted(body: dict[str, Any]) -> dict[str, Any]:
    """An acknowledgement; a short summary when the executor asks for one."""
    messages = body["messages"]
    if messages and "You summarize" in str(messages[0].get("content")):
        return {"role": "assistant", "content": SUMMARY}
    last = [m for m in messages if m["role"] == "user"][-1]
    return {"role": "assistant", "content": f"Noted: {str(last['content'])[:40]}"}


async def summaries(http: httpx.AsyncClient, agent_id: str) -> int:
    """Summary messages made so far (their text starts with the executor's note)."""
    count = 0
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1000, "order": "asc"}
        if after:
            params["after"] = after
        page = (await http.get(f"/v1/agents/{agent_id}/messages", params=params)).json()
        if not page:
            return count
        count += sum("prior messages have been hidden" in str(m.get("content")) for m in page)
        after = page[-1]["id"]


async def main(messages: int, block: int, window: int) -> None:
    llm = ZeroLatencyLLM(scripted, realistic_usage=True)
    llm.start()
    try:
        async with local_system(llm.base_url, ("gateway", "executor", "memory")) as system:
            http = system.http
            created = await http.post(
                "/v1/agents/",
                json={
                    "model": "openai/gpt-4o-mini",
                    "context_window_limit": window,
                    "memory_blocks": [{"label": "human", "value": "bench"}],
                },
            )
            assert created.status_code == 200, created.text
            agent_id = created.json()["id"]
            print(
                f"{messages} messages to one agent (context window {window} tokens),"
                f" per block of {block}: wall s, gateway ms per message (median, p99)"
            )
            for first in range(0, messages, block):
                timings = []
                start = time.perf_counter()
                for i in range(first, min(first + block, messages)):
                    text = f"Message {i}: it rained a little today, then the sun came out."
                    response = await http.post(
                        f"/v1/agents/{agent_id}/messages", json={"input": text}
                    )
                    assert response.status_code == 200, response.text
                    timings.append(server_ms(response))
                wall = time.perf_counter() - start
                print(
                    f"  {first:>6}-{first + len(timings) - 1:<6} {wall:7.1f} s"
                    f"   median {statistics.median(timings):6.2f}"
                    f"   p99 {percentile(timings, 0.99):7.2f}"
                    f"   summaries so far {await summaries(http, agent_id)}",
                    flush=True,
                )
    finally:
        llm.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--block", type=int, default=1_000)
    parser.add_argument("--window", type=int, default=8_000)
    args = parser.parse_args()
    asyncio.run(main(args.messages, args.block, args.window))

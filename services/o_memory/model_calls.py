"""The memory service's questions to an agent's model, asked of the executor.

The executor holds O's provider clients (every protocol, their retries and keys), so the
memory service asks it over NATS (`o.rpc.executor.generate`, as the gateway's generate route
does) instead of holding an LLM SDK of its own: a memory service that embeds locally never
imports one (docs/memory.md#footprint), and an agent on any provider has its memories rated.

A question that gets no answer (no executor, the provider failing, too slow) is answered
with None: the caller falls back to its neutral default, as for an answer it cannot parse.
"""

from __future__ import annotations

import logging
from typing import Any

from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from o_contracts import subjects
from o_contracts.models import Usage
from o_contracts.requests import Generate, Generated
from o_memory.judgement import Answer
from o_runtime.watched_requests import request_watched

log = logging.getLogger(__name__)

# The executor's own retries of a failing provider sit inside this.
ASK_TIMEOUT = 90.0


class ExecutorModel:
    """`ask` for o_memory/judgement.py, over the service's NATS connection."""

    def __init__(self, connection: NATS, timeout: float = ASK_TIMEOUT) -> None:
        self._nc = connection
        self._timeout = timeout

    async def ask(self, llm_config: dict[str, Any], prompt: str) -> Answer:
        handle = str(llm_config.get("handle") or "")
        if "/" not in handle:
            return Answer(None)
        request = Generate(handle=handle, llm_config=llm_config, prompt=prompt)
        try:
            # Watched: an executor that dies while it generates is noticed at once, and
            # another asked (o_runtime/watched_requests.py), not waited out for ASK_TIMEOUT
            # while the agent's memory command waits on the answer.
            reply = await request_watched(
                self._nc,
                subjects.EXECUTOR_GENERATE,
                request.encode(),
                role="executor",
                timeout=self._timeout,
            )
            answer = Generated.decode(reply.data)
        except NoRespondersError:
            log.warning("memory judgement with %s: no executor is running", handle)
            return Answer(None)
        except NatsTimeout:
            log.warning("memory judgement with %s: no answer in %.0f s", handle, self._timeout)
            return Answer(None)
        except ValueError as exc:  # msgpack's and pydantic's errors both
            log.warning("memory judgement with %s: unreadable answer: %s", handle, exc)
            return Answer(None)
        if not answer.ok:
            log.warning("memory judgement with %s failed: %s", handle, answer.error)
            return Answer(None)
        usage = Usage(
            prompt_tokens=answer.prompt_tokens,
            completion_tokens=answer.completion_tokens,
            total_tokens=answer.prompt_tokens + answer.completion_tokens,
        )
        return Answer(answer.content or None, usage)

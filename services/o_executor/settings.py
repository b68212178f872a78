"""The executor's settings, read once at start (o_runtime/env.py validates them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from o_executor.llm import Retries
from o_executor.web.settings import WebSettings
from o_runtime.env import Env


@dataclass(frozen=True)
class ExecutorSettings:
    # A run can take minutes; the consumer heartbeats every ack_wait/3 while it
    # works. A killed executor's run goes to another replica (or its restart)
    # after ack_wait, and the agent's later runs wait for it: 30 s stalled every
    # agent with a run on a killed executor (chaos suite). A delivery to a live
    # but frozen executor is safe: the two meet on the log (RunTakenOver).
    ack_wait: float = 5.0
    llm: Retries = field(default_factory=Retries)
    # Wall-clock limit per user tool call; the sandbox may enforce a lower one.
    tool_timeout: float = 30.0
    # How long a multi-agent tool waits for the other agent's run to end; then the tool
    # returns an error naming that run (which goes on) and the caller's run goes on.
    agent_reply_timeout: float = 300.0
    # O_EVOLUTION_ENABLED=0 (server-wide): no agent has evolution tools.
    evolution_enabled: bool = True
    # web_search and fetch_webpage (o_executor/web/).
    web: WebSettings = field(default_factory=WebSettings)
    # O_PROVIDER_TRACES=0: steps' exchanges with their providers are not kept
    # (o_executor/provider_traces.py).
    provider_traces: bool = True

    @classmethod
    def from_env(cls, env: Env) -> ExecutorSettings:
        return cls(
            ack_wait=env.number("O_EXECUTOR_ACK_WAIT", 5.0, minimum=0.5),
            llm=Retries(
                max_retries=env.integer("O_LLM_MAX_RETRIES", 3, minimum=0),
                backoff=env.number("O_LLM_BACKOFF", 0.5, minimum=0.0),
            ),
            tool_timeout=env.number("O_TOOL_TIMEOUT", 30.0, minimum=0.1),
            agent_reply_timeout=env.number("O_AGENT_REPLY_TIMEOUT", 300.0, minimum=0.1),
            evolution_enabled=env.integer("O_EVOLUTION_ENABLED", 1, minimum=0) > 0,
            web=WebSettings.from_env(env),
            provider_traces=env.flag("O_PROVIDER_TRACES", default=True),
        )

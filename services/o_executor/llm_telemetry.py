"""An LLM call as telemetry sees it: a span with OpenTelemetry's GenAI semantic
conventions, and the duration, token and error metrics (o_runtime/instruments.py); and a
tool call's span (`execute_tool <name>`).

The span is named `chat <model>` and carries `gen_ai.operation.name`,
`gen_ai.provider.name` (and the older `gen_ai.system`), `gen_ai.request.model`,
`gen_ai.usage.input_tokens` / `output_tokens` and `gen_ai.response.finish_reasons`;
the prompt and the answer are never put on it (they are the users' data, and the log
has them). The provider is O's name for it, the part of the handle before the slash
(`openai`, `anthropic`, a named provider such as `lab`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry import trace

from o_contracts.models import Usage
from o_runtime.instruments import measured
from o_runtime.tracing import recording, tracer

OPERATION = "chat"


@dataclass
class LLMCall:
    provider: str
    model: str
    span: trace.Span

    def failed_attempt(self, exc: BaseException) -> None:
        """An attempt failed (it may be retried): counted by the error's type."""
        measured.llm_errors.add(
            1,
            {
                "gen_ai.provider.name": self.provider,
                "gen_ai.request.model": self.model,
                "error.type": type(exc).__name__,
            },
        )

    def answered(self, usage: Usage, finish_reason: str | None) -> None:
        base = {"gen_ai.provider.name": self.provider, "gen_ai.request.model": self.model}
        measured.llm_tokens.add(usage.prompt_tokens, base | {"gen_ai.token.type": "input"})
        measured.llm_tokens.add(usage.completion_tokens, base | {"gen_ai.token.type": "output"})
        if self.span.is_recording():
            self.span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": usage.completion_tokens,
                    "gen_ai.response.finish_reasons": [finish_reason or ""],
                }
            )


@contextmanager
def llm_call(provider: str, model: str) -> Iterator[LLMCall]:
    """Around one LLM call, retries included."""
    start = time.perf_counter()
    error: str | None = None
    attributes = {
        "gen_ai.operation.name": OPERATION,
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
    }
    with (
        tracer.start_as_current_span(
            f"{OPERATION} {model}",
            kind=trace.SpanKind.CLIENT,
            attributes=attributes | {"gen_ai.system": provider},
        )
        if recording()
        else _no_span()
    ) as span:
        try:
            yield LLMCall(provider, model, span)
        except BaseException as exc:
            error = type(exc).__name__
            if span.is_recording():
                span.set_attribute("error.type", error)
            raise
        finally:
            measured.llm_duration.record(
                time.perf_counter() - start,
                attributes | {"error.type": error} if error else attributes,
            )


@contextmanager
def _no_span() -> Iterator[trace.Span]:
    yield trace.INVALID_SPAN


@contextmanager
def tool_span(name: str, call_id: str) -> Iterator[trace.Span]:
    """A tool call's span (GenAI conventions); none at all while spans are not recorded."""
    if not recording():
        yield trace.INVALID_SPAN
        return
    with tracer.start_as_current_span(
        f"execute_tool {name}",
        kind=trace.SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        },
    ) as span:
        yield span

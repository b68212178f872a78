"""Every metric O records, defined once: its name, unit, description and attributes.

`measured` holds the instruments every service records on (through the API's global
meter provider: they do nothing until o_runtime/metrics.py sets the SDK's up). Gauges
of things only a server can tell (a JetStream consumer's backlog, a projection's lag,
the dead letters kept) are sampled into `samples` by o_runtime/sampling.py and read
when metrics are collected. docs/observability.md lists the metrics as Prometheus
names them (dots become underscores, seconds add `_seconds`, counters `_total`).

Attributes are few and bounded (a route template, never a path; a provider and a
model as configured; a consumer or projection name), so a scrape stays small.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

# Bucket boundaries in seconds. HTTP's are OpenTelemetry's semantic conventions' advice;
# the GenAI ones (LLM calls, steps) too, doubling from 10 ms to 82 s; runs go further.
HTTP_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]
GENAI_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96]
RUN_BUCKETS = [*GENAI_BUCKETS, 81.92, 163.84, 327.68]
COMMAND_BUCKETS = [0.001, 0.0025, *HTTP_BUCKETS, 30, 60, 120]


@dataclass(frozen=True)
class SandboxUse:
    """The tool sandbox's warm pool: workers waiting, workers running a tool, the target."""

    ready: int
    busy: int
    target: int


@dataclass
class Samples:
    """What the sampler last read (o_runtime/sampling.py), by consumer or projection."""

    queue_pending: dict[str, int] = field(default_factory=dict)
    queue_ack_pending: dict[str, int] = field(default_factory=dict)
    projection_lag: dict[str, float] = field(default_factory=dict)
    dead_letters_stored: dict[str, int] = field(default_factory=dict)
    # The sandbox service sets this; read at collection.
    sandbox: Callable[[], SandboxUse] | None = None


def _by(values: dict[str, int] | dict[str, float], key: str) -> Iterable[Observation]:
    return [Observation(value, {key: name}) for name, value in list(values.items())]


class Instruments:
    def __init__(self, meter: Meter, samples: Samples) -> None:
        self.samples = samples
        # -- the gateway --------------------------------------------------------
        self.http_duration = meter.create_histogram(
            "http.server.request.duration",
            unit="s",
            description="HTTP requests to the gateway, by route template, method and status",
            explicit_bucket_boundaries_advisory=HTTP_BUCKETS,
        )
        # -- commands (every service's consumers) ------------------------------------
        self.command_duration = meter.create_histogram(
            "o.command.duration",
            unit="s",
            description="Commands handled, by consumer, command type and outcome",
            explicit_bucket_boundaries_advisory=COMMAND_BUCKETS,
        )
        self.commands_taken_over = meter.create_counter(
            "o.command.taken_over",
            unit="{message}",
            description="Commands a dead process held, given back by this one, by consumer",
        )
        # -- the agent loop (executor; evolution's shadow runs too) -----------------
        self.step_duration = meter.create_histogram(
            "o.agent.step.duration",
            unit="s",
            description="Steps of agent runs (the model's answer and its tool calls)",
            explicit_bucket_boundaries_advisory=GENAI_BUCKETS,
        )
        self.run_duration = meter.create_histogram(
            "o.run.duration",
            unit="s",
            description="Agent runs from their command's delivery to their end, by stop reason",
            explicit_bucket_boundaries_advisory=RUN_BUCKETS,
        )
        self.runs_completed = meter.create_counter(
            "o.runs.completed",
            unit="{run}",
            description="Agent runs ended, by stop reason",
        )
        self.llm_duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="LLM calls (retries included), by provider, model and error",
            explicit_bucket_boundaries_advisory=GENAI_BUCKETS,
        )
        self.llm_tokens = meter.create_counter(
            "o.llm.tokens",
            unit="{token}",
            description="Tokens the models reported, by provider, model and type (input|output)",
        )
        self.llm_errors = meter.create_counter(
            "o.llm.errors",
            unit="{error}",
            description="Failed LLM requests (each failed attempt), by provider, model and type",
        )
        self.provider_traces_dropped = meter.create_counter(
            "o.provider_traces.dropped",
            unit="{trace}",
            description="Steps' provider traces not kept (too many writes at once, or failed)",
        )
        # -- the log and the read models -------------------------------------------
        self.dead_letters = meter.create_counter(
            "o.dead_letters",
            unit="{message}",
            description="Messages this process dead-lettered, by consumer",
        )
        self.projection_events = meter.create_counter(
            "o.projection.events",
            unit="{event}",
            description="Events applied to projections, by projection",
        )
        meter.create_observable_gauge(
            "o.queue.pending",
            [lambda _: _by(samples.queue_pending, "consumer")],
            unit="{message}",
            description="Messages not yet delivered to a durable consumer (sampled)",
        )
        meter.create_observable_gauge(
            "o.queue.ack_pending",
            [lambda _: _by(samples.queue_ack_pending, "consumer")],
            unit="{message}",
            description="Messages delivered to a durable consumer and not yet acknowledged",
        )
        meter.create_observable_gauge(
            "o.projection.lag",
            [lambda _: _by(samples.projection_lag, "projection")],
            unit="s",
            description="Age of the oldest event a projection has not applied (0: caught up)",
        )
        meter.create_observable_gauge(
            "o.dead_letters.stored",
            [lambda _: _by(samples.dead_letters_stored, "consumer")],
            unit="{message}",
            description="Dead letters kept in O_DEAD_LETTERS, by consumer (sampled)",
        )
        # -- the tool sandbox -------------------------------------------------------
        self.sandbox_executions = meter.create_counter(
            "o.sandbox.executions",
            unit="{execution}",
            description="Tool runs in the sandbox, by outcome",
        )
        self.sandbox_duration = meter.create_histogram(
            "o.sandbox.execution.duration",
            unit="s",
            description="Tool runs in the sandbox, by outcome",
            explicit_bucket_boundaries_advisory=GENAI_BUCKETS,
        )
        meter.create_observable_gauge(
            "o.sandbox.workers",
            [self._sandbox_workers],
            unit="{worker}",
            description="The sandbox's workers: ready (warm, waiting) and busy (running a tool)",
        )
        meter.create_observable_gauge(
            "o.sandbox.pool.size",
            [self._sandbox_target],
            unit="{worker}",
            description="Warm workers the sandbox keeps ready (O_SANDBOX_POOL)",
        )
        # -- evolution ----------------------------------------------------------------
        self.evolution_decisions = meter.create_counter(
            "o.evolution.decisions",
            unit="{decision}",
            description="Evolution decisions recorded, by decision type",
        )

    def _sandbox_workers(self, _: CallbackOptions) -> Iterable[Observation]:
        if self.samples.sandbox is None:
            return []
        use = self.samples.sandbox()
        return [
            Observation(use.ready, {"state": "ready"}),
            Observation(use.busy, {"state": "busy"}),
        ]

    def _sandbox_target(self, _: CallbackOptions) -> Iterable[Observation]:
        if self.samples.sandbox is None:
            return []
        return [Observation(self.samples.sandbox().target)]


samples = Samples()
measured = Instruments(metrics.get_meter("o"), samples)

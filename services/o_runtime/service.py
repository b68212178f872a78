"""What every O service process does: connect, migrate, consume, answer health, stop cleanly."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from typing import Any

import asyncpg
from faststream.nats import NatsBroker

from o_contracts import subjects
from o_runtime import event_loop, llm_providers, metrics, tool_secrets
from o_runtime.commands import CommandConsumer
from o_runtime.db import connect_pool
from o_runtime.env import BadSetting, Env
from o_runtime.event_tap import EventTap
from o_runtime.eventlog import EventLog
from o_runtime.health import serve_health
from o_runtime.instruments import samples
from o_runtime.liveness import liveness
from o_runtime.logging_setup import setup_logging
from o_runtime.nats_tls_records import deliveries_in_one_record
from o_runtime.projector import Projection, Projector
from o_runtime.reactor import EventReactor
from o_runtime.readiness import Readiness, check_readiness
from o_runtime.reads import ProjectionReads
from o_runtime.roll_call import RollCallAnswerer
from o_runtime.sampling import FRESH, Durable, Followed, Sampler
from o_runtime.settings import Settings
from o_runtime.standby import is_spare, promoted, say_loaded
from o_runtime.telemetry import setup_telemetry
from o_runtime.waiting import ProjectionWatcher

log = logging.getLogger(__name__)

# How long a service takes at most to stop once asked (the supervisor kills it after 10 s).
STOP_TIMEOUT = 8.0


def check_shared_settings(env: Env) -> None:
    """What every service reads lazily, validated at start all the same: the model
    providers (o_runtime/llm_providers.py) and the tool-secrets key (tool_secrets.py)."""
    try:
        llm_providers.configured(env.environ)
    except llm_providers.ProviderNotConfigured as exc:
        raise BadSetting(str(exc)) from None
    try:
        tool_secrets.check_key(env.environ)
    except tool_secrets.SecretsUnavailable as exc:
        raise BadSetting(str(exc)) from None


class Service:
    """Subclasses register their projectors and consumers in `setup`."""

    name = "service"
    # The tool sandbox is cut off from Postgres (it may reach only NATS).
    needs_database = True
    # ... and from JetStream (its identity may only answer its requests: docs/security.md).
    uses_jetstream = True
    # Whether this service samples the dead letters kept (one service does: the
    # stream is the whole system's).
    samples_dead_letters = False

    def __init__(self, settings: Settings, env: Env | None = None) -> None:
        self.settings = settings
        # The service's own settings are read here, at start, so a bad value
        # stops it before it connects anything (configure()).
        env = env or Env()
        self.configure(env)
        check_shared_settings(env)
        self.eventlog: EventLog
        self.pool: asyncpg.Pool
        self.broker: NatsBroker
        self.watcher: ProjectionWatcher
        # Reads a decision relies on (reads.py).
        self.reads: ProjectionReads
        self.projectors: list[Projector] = []
        self.consumers: list[CommandConsumer] = []
        # Event reactors (reactor.py), started after the consumers, stopped with them.
        self.reactors: list[EventReactor] = []
        # Answers `o.rpc.roll_call` once started (o_runtime/roll_call.py: o_ops status).
        self.roll_call = RollCallAnswerer(self.name, self.readiness)
        self._stop = asyncio.Event()

    def configure(self, env: Env) -> None:
        """Read the service's own settings (typed, validated: o_runtime/env.py)."""

    def preload(self) -> None:
        """Load what setup() would, that needs no connection (SDKs, models): a spare
        process does it before it is needed (o_runtime/standby.py). setup() must not
        rely on it having run."""

    def incarnation(self) -> str | None:
        """What this process is called on its liveness subject (None: a fresh name)."""
        return None

    async def setup(self) -> None:
        """`consume()` commands, `project()` the read models, add subscribers to `self.broker`."""

    def consume(self, consumer: CommandConsumer) -> None:
        """Handle `consumer`'s commands while the service runs (setup() calls this)."""
        self.consumers.append(consumer)

    def project(self, projection: Projection, tap: EventTap | None = None) -> None:
        """Keep `projection` up to date while the service runs (setup() calls this); `tap`
        is told the events it receives (o_runtime/event_tap.py)."""
        self.projectors.append(
            Projector(
                projection,
                self.pool,
                self.eventlog,
                on_committed=self.watcher.applied,
                settings=self.settings.projections,
                tap=tap,
                on_following=self.watcher.following,
            )
        )

    async def started(self) -> None:
        """Runs once the broker consumes; e.g. start an HTTP server."""

    async def stopping(self) -> None:
        """Runs first on shutdown."""

    def readiness_checks(self) -> dict[str, str | None]:
        """The service's own readiness checks by name: None if fine, else why not
        (NATS, Postgres and the projections' lag are checked for every service)."""
        return {}

    async def readiness(self) -> Readiness:
        return await check_readiness(self)

    async def metrics_text(self) -> bytes | None:
        """This process's metrics for Prometheus (sampled afresh), None if metrics are off."""
        if not metrics.serving():
            return None
        await self.sampler.refresh(fresh=FRESH)
        return metrics.prometheus_text()

    def _sampler(self) -> Sampler:
        durables = [Durable(subjects.COMMANDS_STREAM, c.name) for c in self.consumers]
        durables += [Durable(subjects.EVENTS_STREAM, r.name) for r in self.reactors]
        return Sampler(
            self.eventlog.js,
            self.pool if self.needs_database else None,
            samples,
            durables=durables,
            projections=[Followed(p.name, p.projection.filter_subject) for p in self.projectors],
            dead_letters=self.samples_dead_letters,
            interval=self.settings.telemetry.sample_interval,
        )

    async def start(self) -> None:
        identity = self.settings.nats_identity
        self.eventlog = await EventLog.connect(
            self.settings.nats_url,
            name=self.name,
            replicas=self.settings.stream_replicas,
            identity=identity,
            jetstream=self.uses_jetstream,
        )
        # Answering "are you there?" before holding anything (o_runtime/liveness.py).
        await liveness(self.eventlog, self.incarnation())
        if self.needs_database:
            self.pool = await connect_pool(self.settings.database_url)
            self.watcher = ProjectionWatcher(self.settings.database_url, self.eventlog.nc)
            await self.watcher.start()
            self.reads = ProjectionReads(self.pool, self.watcher)
        # FastStream logs each message; its logger is quiet below WARNING (logging_setup).
        self.broker = NatsBroker(
            self.settings.nats_url,
            logger=logging.getLogger("faststream.o"),
            # FastStream's default 2 s: see EventLog.connect.
            reconnect_time_wait=0.1,  # type: ignore[arg-type]  # (a float: nats-py sleeps it)
            max_reconnect_attempts=-1,
            **identity.broker_options(),
        )
        await self.setup()
        self.sampler = self._sampler()
        for projector in self.projectors:
            projector.start()
        for consumer in self.consumers:
            # (Set here rather than at every consumer's making in setup().)
            consumer.retries = self.settings.retries
            await consumer.start()
        for reactor in self.reactors:
            reactor.retries = self.settings.retries
            await reactor.start()
        connection = await self.broker.connect()
        if identity.tls is not None:
            # (Before its subscribers are made: their ids are numbered from here.)
            deliveries_in_one_record(connection)
        await self.broker.start()
        if metrics.serving():
            self.sampler.start()
        await self.started()
        await self.roll_call.start(self.eventlog.nc)

    async def stop(self) -> None:
        await self.roll_call.stop()
        await self.stopping()
        await self.sampler.stop()
        for consumer in self.consumers:
            await consumer.stop()
        for reactor in self.reactors:
            await reactor.stop()
        await self.broker.stop()
        for projector in self.projectors:
            await projector.stop()
        if self.needs_database:
            await self.watcher.stop()
            await self.pool.close()
        await self.eventlog.close()

    async def run_forever(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        await self.start()
        # Everything loaded so far (modules, SDK clients, schemas) lives as long
        # as the process: out of the collector's sight, a full collection no
        # longer walks it (measured: the executor's took 127 ms, 16 ms after).
        gc.collect()
        gc.freeze()
        health: Any = None
        if self.settings.health_port:
            health = await serve_health(
                self.settings.health_port, self.readiness, self.metrics_text
            )
        log.info("%s started", self.name)
        await self._stop.wait()
        log.info("%s stopping", self.name)
        if health is not None:
            health.close()
        try:
            # Stopping waits on NATS and Postgres (drains, pool close); with either
            # down it could wait for ever. Whatever is unacked is redelivered.
            await asyncio.wait_for(self.stop(), STOP_TIMEOUT)
        except TimeoutError:
            log.warning("%s did not stop cleanly within %.0fs; exiting", self.name, STOP_TIMEOUT)


def main(service_cls: type[Service]) -> None:
    env = Env()
    try:
        settings = Settings.from_env(service_cls.name, service_cls.needs_database, env)
        service = service_cls(settings, env)
        loop = event_loop.loop_factory(env)
    except BadSetting as exc:
        raise SystemExit(f"{service_cls.name}: {exc}") from None
    setup_logging(service_cls.name, settings.log_level)
    if is_spare(env.environ):
        # A terminal's Ctrl-C reaches the spare too: the supervisor stops it (SIGTERM), with
        # no KeyboardInterrupt traceback from a process that never started.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        service.preload()
        say_loaded(env.environ)
        if not promoted():
            return
        signal.signal(signal.SIGINT, signal.default_int_handler)
        log.info("%s: spare promoted", service_cls.name)
        # What the settings read from files is read again: the NATS seed may have been
        # rotated while the spare waited (docs/security.md: a rotation restarts processes).
        try:
            service.settings = Settings.from_env(
                service_cls.name, service_cls.needs_database, Env()
            )
        except BadSetting as exc:
            raise SystemExit(f"{service_cls.name}: {exc}") from None
    setup_telemetry(service_cls.name, settings.telemetry)
    event_loop.run(service.run_forever(), loop)

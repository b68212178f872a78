"""What O needs on its NATS before any service starts: streams, buckets, durable consumers.

Only the setup role makes or changes them (`python -m o_setup apply`: a Job in `k8s/`, the
embedded server's first start for `make run` and the tests); services bind to what is
there. A service that could make consumers could also point a push consumer of one stream
at another stream's subjects (nats-server does not check a consumer's deliver subject
against its maker's permissions): commands an outside publisher sent would become events.
So durable consumers are declared here, with the settings their services run them with,
and `apply` creates them or brings them up to date.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    KeyValueConfig,
    StorageType,
)
from nats.js.errors import BadRequestError, BucketNotFoundError, NotFoundError

from o_contracts import subjects
from o_executor.run_queue import BUCKET as RUNS_BUCKET
from o_executor.settings import ExecutorSettings
from o_runtime import refusals
from o_runtime.commands import command_consumer_config
from o_runtime.env import Env
from o_runtime.eventlog import ensure_streams
from o_runtime.file_store import ensure_file_store
from o_runtime.holdings import HELD_BUCKET, bucket_config
from o_runtime.images import ensure_image_store
from o_runtime.reactor import reactor_config, replace_cumulative_consumer
from o_schedules.dispatch import dispatch_consumer_config

log = logging.getLogger(__name__)

__all__ = [
    "DURABLE",
    "HELD_BUCKET",
    "RUNS_BUCKET",
    "Durable",
    "apply",
    "commands",
    "durables",
    "events",
]


@dataclass(frozen=True)
class Durable:
    stream: str
    name: str
    filter_subject: str
    # Which role pulls from it (o_setup/roles.py grants it).
    owner: str

    def config(self, env: Env) -> ConsumerConfig:
        config = _CONFIGS[f"{self.stream}/{self.name}"](env)
        config.durable_name = self.name
        config.name = self.name
        config.filter_subject = self.filter_subject
        return config


# Every durable consumer of O: the same name, filter and settings the services'
# CommandConsumer / EventReactor / followers are built with (tests/unit/test_nats_roles.py
# compares). A new one is one line here and one grant in roles.py.
_DECLARED = (
    Durable(subjects.COMMANDS_STREAM, "executor", subjects.EXECUTOR_COMMANDS, "executor"),
    Durable(subjects.COMMANDS_STREAM, "memory", subjects.MEMORY_COMMANDS, "memory"),
    Durable(subjects.COMMANDS_STREAM, "memory-files", subjects.FILES_COMMANDS, "memory"),
    Durable(subjects.COMMANDS_STREAM, "evolution", subjects.EVOLUTION_COMMANDS, "evolution"),
    Durable(subjects.COMMANDS_STREAM, "schedules", subjects.SCHEDULE_COMMANDS, "evolution"),
    Durable(subjects.COMMANDS_STREAM, "gateway-callbacks", subjects.CALLBACK_COMMANDS, "gateway"),
    Durable(
        subjects.EVENTS_STREAM, "memory-evolution-archive", subjects.EVOLUTION_EVENTS, "memory"
    ),
    Durable(
        subjects.EVENTS_STREAM,
        "evolution-turns",
        subjects.AGENT_AND_CONVERSATION_EVENTS,
        "evolution",
    ),
    Durable(subjects.EVENTS_STREAM, "schedule-dispatch", subjects.SCHEDULE_EVENTS, "evolution"),
    Durable(subjects.EVENTS_STREAM, "memory-file-uploads", subjects.FILE_UPLOADS, "memory"),
)
# By "<stream>/<name>" (a command consumer and a reactor may share a name).
DURABLE: Mapping[str, Durable] = {f"{d.stream}/{d.name}": d for d in _DECLARED}


def commands(name: str) -> Durable:
    return DURABLE[f"{subjects.COMMANDS_STREAM}/{name}"]


def events(name: str) -> Durable:
    return DURABLE[f"{subjects.EVENTS_STREAM}/{name}"]


def _callbacks_config(env: Env) -> ConsumerConfig:
    from o_gateway.callbacks.settings import CallbackSettings
    from o_gateway.service import MAX_WAITING_DELIVERIES

    return command_consumer_config(
        CallbackSettings.from_env(env).ack_wait, max_ack_pending=MAX_WAITING_DELIVERIES
    )


def _files_config(env: Env) -> ConsumerConfig:
    from o_memory.files.settings import FileSettings

    files = FileSettings.from_env(env)
    return command_consumer_config(files.ack_wait, max_ack_pending=files.concurrency)


def _executor_config(env: Env) -> ConsumerConfig:
    from o_executor.run_queue import MAX_PENDING_RUNS

    return command_consumer_config(
        ExecutorSettings.from_env(env).ack_wait, max_ack_pending=MAX_PENDING_RUNS
    )


def _memory_config(env: Env) -> ConsumerConfig:
    from o_memory.command_limits import MAX_PENDING_COMMANDS

    return command_consumer_config(10.0, max_ack_pending=MAX_PENDING_COMMANDS)


def _evolution_config(env: Env) -> ConsumerConfig:
    from o_evolution.settings import MAX_PENDING_COMMANDS

    return command_consumer_config(30.0, max_ack_pending=MAX_PENDING_COMMANDS)


def _reactor(env: Env) -> ConsumerConfig:
    return reactor_config("", "")


_CONFIGS: dict[str, Callable[[Env], ConsumerConfig]] = {
    # A run's command comes back this soon after its executor died (ExecutorSettings).
    f"{subjects.COMMANDS_STREAM}/executor": _executor_config,
    f"{subjects.COMMANDS_STREAM}/memory": _memory_config,
    # An evaluation heartbeats while it works; a dead replica's command returns in 30 s.
    f"{subjects.COMMANDS_STREAM}/evolution": _evolution_config,
    f"{subjects.COMMANDS_STREAM}/schedules": lambda env: command_consumer_config(
        10.0, max_ack_pending=16
    ),
    f"{subjects.COMMANDS_STREAM}/gateway-callbacks": _callbacks_config,
    f"{subjects.COMMANDS_STREAM}/memory-files": _files_config,
    f"{subjects.EVENTS_STREAM}/memory-file-uploads": _reactor,
    f"{subjects.EVENTS_STREAM}/memory-evolution-archive": _reactor,
    f"{subjects.EVENTS_STREAM}/evolution-turns": _reactor,
    f"{subjects.EVENTS_STREAM}/schedule-dispatch": lambda env: dispatch_consumer_config(),
}


def durables() -> tuple[Durable, ...]:
    return _DECLARED


# Durable consumers O no longer uses, removed by `apply` (by stream and name):
# - "gateway-callbacks" on the events: the gateway's reactor that saw runs end to ask for
#   their callbacks; the executor asks as each run ends (docs/callbacks.md). Run ends it had
#   not reacted to when it goes (none if a gateway ran until the upgrade) get no callback:
#   `apply` logs how many.
RETIRED = ((subjects.EVENTS_STREAM, "gateway-callbacks"),)


async def _remove_retired(js: JetStreamContext) -> None:
    for stream, name in RETIRED:
        try:
            info = await js.consumer_info(stream, name)
        except NotFoundError:
            continue
        if info.num_pending or info.num_ack_pending:
            log.warning(
                "retired durable %s on %s had %d events it had not handled; removing it",
                name,
                stream,
                (info.num_pending or 0) + (info.num_ack_pending or 0),
            )
        with contextlib.suppress(NotFoundError):
            await js.delete_consumer(stream, name)


async def _ensure_bucket(js: JetStreamContext, config: KeyValueConfig) -> None:
    """The key-value bucket `config` names, created when missing (kept as it is otherwise)."""
    assert config.bucket is not None
    try:
        await js.key_value(config.bucket)
    except BucketNotFoundError:
        await js.create_key_value(config)


async def _ensure_kv(js: JetStreamContext, replicas: int) -> None:
    await _ensure_bucket(
        js,
        KeyValueConfig(
            bucket=RUNS_BUCKET,
            history=1,
            direct=True,
            storage=StorageType.FILE,
            replicas=replicas,
        ),
    )
    # What each process holds of its consumers, for fast takeover (o_runtime/holdings.py).
    await _ensure_bucket(js, bucket_config(replicas))
    # The refusals each consumer answered, for their redeliveries (o_runtime/refusals.py).
    await _ensure_bucket(js, refusals.bucket_config(replicas))


async def _ensure_provider_traces(js: JetStreamContext, env: Env, replicas: int) -> None:
    """Steps' provider traces (o_contracts/provider_traces.py): kept O_PROVIDER_TRACE_DAYS,
    at most O_PROVIDER_TRACE_MAX_MB in all, the oldest going first when it is full (a
    key-value bucket refuses new keys when full; diagnostics should rather forget)."""
    bucket = subjects.PROVIDER_TRACES_BUCKET
    max_age = env.number("O_PROVIDER_TRACE_DAYS", 7.0, minimum=0.001) * 86400
    max_bytes = env.integer("O_PROVIDER_TRACE_MAX_MB", 1024, minimum=16) * 1024 * 1024
    await _ensure_bucket(
        js,
        KeyValueConfig(
            bucket=bucket,
            history=1,
            ttl=max_age,
            max_bytes=max_bytes,
            direct=True,
            storage=StorageType.FILE,
            replicas=replicas,
        ),
    )
    # (Made earlier with other limits, or by a key-value bucket's own discard policy: brought
    # to these.)
    config = (await js.stream_info(f"KV_{bucket}")).config
    if (config.max_age, config.max_bytes, config.discard) != (
        max_age,
        max_bytes,
        DiscardPolicy.OLD,
    ):
        config.max_age, config.max_bytes, config.discard = max_age, max_bytes, DiscardPolicy.OLD
        await js.update_stream(config)


async def apply(js: JetStreamContext, env: Env, replicas: int = 1) -> None:
    """Create O's streams, buckets and durable consumers, or bring them up to date."""
    await ensure_streams(js, replicas)
    await _ensure_kv(js, replicas)
    await _ensure_provider_traces(js, env, replicas)
    await ensure_image_store(js, replicas)
    await ensure_file_store(js, replicas)
    await _remove_retired(js)
    for durable in _DECLARED:
        config = durable.config(env)
        if durable.stream == subjects.EVENTS_STREAM and config.ack_policy == AckPolicy.EXPLICIT:
            # Reactors made before per-event acks (NATS cannot change an ack policy in place).
            await replace_cumulative_consumer(
                js, durable.name, durable.filter_subject, config.ack_wait or 30.0
            )
        try:
            await js.add_consumer(durable.stream, config=config)
        except BadRequestError as exc:
            # A setting the server cannot change in place (the filter, the start): keep it.
            log.warning("durable %s on %s not updated: %s", durable.name, durable.stream, exc)

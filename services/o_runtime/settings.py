"""What every service process is configured with, built once from the environment at start.

Each service adds its own (o_executor/settings.py, o_gateway/settings.py,
o_tool_sandbox/limits.py); all of them are frozen and validated: a bad value
stops the service at start with the variable's name (o_runtime/env.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from o_runtime.env import BadSetting, Env
from o_runtime.nats_identity import Identity, IdentityMissing
from o_runtime.nats_tls import TlsMisconfigured
from o_runtime.retries import Retries
from o_runtime.telemetry_settings import TelemetrySettings


@dataclass(frozen=True)
class ProjectionSettings:
    # How often a standby replica tries to become a projection's follower.
    standby_poll: float = 1.0
    # First retry delay after a passing failure (a deadlock, a lock timeout); doubles.
    retry_delay: float = 0.05
    # How long a checkpoint may lag behind events a projection does not handle
    # while no one waits for them.
    skip_lag: float = 1.0

    @classmethod
    def from_env(cls, env: Env) -> ProjectionSettings:
        return cls(
            standby_poll=env.number("O_PROJECTION_STANDBY_POLL", 1.0, minimum=0.001),
            retry_delay=env.number("O_PROJECTION_RETRY_DELAY", 0.05, minimum=0.0),
            skip_lag=env.number("O_PROJECTION_SKIP_LAG", 1.0, minimum=0.0),
        )


@dataclass(frozen=True)
class Settings:
    nats_url: str
    database_url: str
    service_name: str
    health_port: int | None = None
    log_level: str = "INFO"
    # JetStream replicas of O's streams: 1 on one server, 3 on a NATS cluster.
    stream_replicas: int = 1
    # Traces, metrics and readiness (o_runtime/telemetry_settings.py).
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    projections: ProjectionSettings = field(default_factory=ProjectionSettings)
    # When a failed command or reaction is tried again (o_runtime/retries.py).
    retries: Retries = field(default_factory=Retries)
    # Who the service is on NATS (O_NATS_NKEY: its NKEY seed file; nats_identity.py).
    identity: Identity | None = None

    @property
    def nats_identity(self) -> Identity:
        return self.identity or Identity(self.service_name)

    @classmethod
    def from_env(cls, service_name: str, needs_database: bool, env: Env) -> Settings:
        nats_url = env.optional("NATS_URL")
        database_url = env.text("DATABASE_URL", "")
        if not nats_url or (needs_database and not database_url):
            raise SystemExit(
                f"{service_name}: NATS_URL and DATABASE_URL must be set "
                "(`make run` sets them for the embedded servers)"
            )
        health = env.integer("O_HEALTH_PORT", 0, minimum=0)
        level = env.text("O_LOG_LEVEL", "INFO").upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise BadSetting(f"O_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, not {level!r}")
        try:
            identity = Identity.of(service_name, env.environ)
        except (IdentityMissing, TlsMisconfigured) as exc:
            raise BadSetting(str(exc)) from None
        return cls(
            identity=identity,
            nats_url=nats_url,
            database_url=database_url,
            service_name=service_name,
            health_port=health or None,
            log_level=level,
            stream_replicas=env.integer("O_STREAM_REPLICAS", 1, minimum=1),
            telemetry=TelemetrySettings.from_env(env),
            projections=ProjectionSettings.from_env(env),
            retries=Retries.from_env(env),
        )

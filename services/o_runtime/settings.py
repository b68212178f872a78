"""Process settings, read once from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    nats_url: str
    database_url: str
    service_name: str
    health_port: int | None
    log_level: str

    @classmethod
    def from_env(cls, service_name: str, needs_database: bool = True) -> Settings:
        nats_url = os.environ.get("NATS_URL")
        database_url = os.environ.get("DATABASE_URL", "")
        if not nats_url or (needs_database and not database_url):
            raise SystemExit(
                f"{service_name}: NATS_URL and DATABASE_URL must be set "
                "(`make run` sets them for the embedded servers)"
            )
        port = os.environ.get("O_HEALTH_PORT")
        return cls(
            nats_url=nats_url,
            database_url=database_url,
            service_name=service_name,
            health_port=int(port) if port else None,
            log_level=os.environ.get("O_LOG_LEVEL", "INFO"),
        )

"""The sandbox's settings: the limits every tool run is held to, and the service's own
(read once at start; o_runtime/env.py validates them). Defaults fit a small tool."""

from __future__ import annotations

from dataclasses import dataclass

from o_runtime.env import Env

MB = 1 << 20


@dataclass(frozen=True)
class Limits:
    timeout: float  # wall clock, seconds (a command may ask for less)
    cpu_seconds: int
    memory_bytes: int
    file_bytes: int
    processes: int
    open_files: int
    output_keep: int  # bytes of stdout/stderr kept for the model
    output_max: int  # bytes after which the tool is stopped
    pool_size: int  # warm workers kept ready

    @classmethod
    def from_env(cls, env: Env | None = None) -> Limits:
        env = env or Env()
        return cls(
            timeout=env.number("O_SANDBOX_TIMEOUT", 60.0, minimum=0.1),
            cpu_seconds=env.integer("O_SANDBOX_CPU_SECONDS", 30, minimum=1),
            memory_bytes=env.integer("O_SANDBOX_MEMORY_MB", 512, minimum=16) * MB,
            file_bytes=env.integer("O_SANDBOX_FILE_MB", 16, minimum=1) * MB,
            processes=env.integer("O_SANDBOX_PROCESSES", 32, minimum=1),
            open_files=env.integer("O_SANDBOX_OPEN_FILES", 64, minimum=16),
            output_keep=env.integer("O_SANDBOX_OUTPUT_KEEP", 64 * 1024, minimum=1024),
            output_max=env.integer("O_SANDBOX_OUTPUT_MAX_MB", 8, minimum=1) * MB,
            pool_size=env.integer("O_SANDBOX_POOL", 4, minimum=0),
        )

    def worker_config(self) -> dict[str, int]:
        return {
            "cpu_seconds": self.cpu_seconds,
            "memory_bytes": self.memory_bytes,
            "file_bytes": self.file_bytes,
            "processes": self.processes,
            "open_files": self.open_files,
        }


@dataclass(frozen=True)
class SandboxSettings:
    limits: Limits
    # Calls one replica runs at once.
    concurrency: int = 8
    # Tools run as uids from here on (root only): one per live worker.
    uid_base: int = 61000
    # The interpreter workers run (else this one, or the system's).
    python: str | None = None

    @classmethod
    def from_env(cls, env: Env) -> SandboxSettings:
        return cls(
            limits=Limits.from_env(env),
            concurrency=env.integer("O_SANDBOX_CONCURRENCY", 8, minimum=1),
            uid_base=env.integer("O_SANDBOX_UID_BASE", 61000, minimum=1000),
            python=env.optional("O_SANDBOX_PYTHON"),
        )

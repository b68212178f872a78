"""The sandbox's limits, from the environment (defaults fit a small tool)."""

from __future__ import annotations

import os
from dataclasses import dataclass


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


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
    def from_env(cls) -> Limits:
        return cls(
            timeout=float(os.environ.get("O_SANDBOX_TIMEOUT", "60")),
            cpu_seconds=_int("O_SANDBOX_CPU_SECONDS", 30),
            memory_bytes=_int("O_SANDBOX_MEMORY_MB", 512) << 20,
            file_bytes=_int("O_SANDBOX_FILE_MB", 16) << 20,
            processes=_int("O_SANDBOX_PROCESSES", 32),
            open_files=_int("O_SANDBOX_OPEN_FILES", 64),
            output_keep=_int("O_SANDBOX_OUTPUT_KEEP", 64 * 1024),
            output_max=_int("O_SANDBOX_OUTPUT_MAX_MB", 8) << 20,
            pool_size=_int("O_SANDBOX_POOL", 4),
        )

    def worker_config(self) -> dict[str, int]:
        return {
            "cpu_seconds": self.cpu_seconds,
            "memory_bytes": self.memory_bytes,
            "file_bytes": self.file_bytes,
            "processes": self.processes,
            "open_files": self.open_files,
        }

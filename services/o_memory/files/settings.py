"""The file worker's settings (o_runtime/env.py validates them)."""

from __future__ import annotations

from dataclasses import dataclass

from o_runtime.env import Env


@dataclass(frozen=True)
class FileSettings:
    # The worker heartbeats every ack_wait/3 while it processes a file; a file held by a
    # worker that died is taken up again (by a replica, or its restart) after ack_wait.
    ack_wait: float = 30.0
    # Files processed at once by one memory replica (parsing and embedding use the CPU).
    concurrency: int = 2
    # Chunks embedded, and recorded, per FileChunksEmbedded event.
    embed_batch: int = 32

    @classmethod
    def from_env(cls, env: Env) -> FileSettings:
        return cls(
            ack_wait=env.number("O_FILES_ACK_WAIT", 30.0, minimum=0.5),
            concurrency=env.integer("O_FILES_CONCURRENCY", 2, minimum=1),
            embed_batch=env.integer("O_FILE_EMBED_BATCH", 32, minimum=1),
        )

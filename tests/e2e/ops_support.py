"""Running the operator's tool (`python -m o_ops`) as an operator would, against a system."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


async def o_ops(env: Mapping[str, str], *args: str, timeout: float = 300.0) -> Ran:
    """`python -m o_ops ARGS` with `env` (NATS_URL, DATABASE_URL, O_NATS_NKEY, O_URL ...)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "o_ops",
        *args,
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())

"""`make run`'s nats-server (o_devtools.embedded.EmbeddedNats, as the supervisor starts it)
accepts no anonymous client, and keeps its keys readable by their owner only."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import nats
import pytest

from o_devtools.embedded import EmbeddedNats
from o_runtime.nats_identity import Identity


async def test_make_runs_nats_refuses_anonymous_clients_and_accepts_its_roles(
    tmp_path: Path,
) -> None:
    server = EmbeddedNats(tmp_path)
    await asyncio.to_thread(server.start)
    try:
        errors: list[str] = []

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        with pytest.raises(Exception):  # noqa: B017  (nats-py's kinds vary; the reason:)
            await nats.connect(
                server.url, error_cb=on_error, allow_reconnect=False, connect_timeout=5
            )
        assert any("authorization violation" in e.lower() for e in errors), errors

        gateway = Identity.from_file("gateway", server.seed_file("gateway"))
        nc = await nats.connect(server.url, allow_reconnect=False, **gateway.options())
        try:
            # The setup role made the log's stream at the first start; a service may read it.
            info = await nc.jetstream().stream_info("O_EVENTS")
            assert info.config.name == "O_EVENTS"
        finally:
            await nc.close()
    finally:
        await asyncio.to_thread(server.stop)

    folder = tmp_path / "nats-auth"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    seeds = sorted(p.name for p in folder.glob("*.nk"))
    assert seeds == sorted(
        f"{r}.nk"
        for r in ("operator", "setup", "gateway", "executor", "memory", "evolution", "tool_sandbox")
    )
    assert {stat.S_IMODE(p.stat().st_mode) for p in folder.glob("*.nk")} == {0o600}
    # The server's configuration holds public keys, never a seed.
    config = (tmp_path / "nats" / "nats-server.conf").read_text()
    assert not any(p.read_text().strip() in config for p in folder.glob("*.nk"))

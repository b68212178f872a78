"""Backup, wipe, restore, rebuild: the same API view.

A system of this module's own (its own NATS, Postgres and five services, in a temporary
folder) gets agents, a conversation, edited blocks and archival passages; `python -m o_ops
backup` copies its streams; everything is then thrown away. A second system starts from
nothing (a fresh nats-server whose streams the setup role made empty, an empty database),
`python -m o_ops restore` restores the streams and rebuilds every projection, and only
then do its services start: the API answers exactly as before, and the agent goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from o_devtools.embedded import EmbeddedServers, start_servers
from o_devtools.health import wait_healthy
from o_devtools.supervisor import DEFAULT_SERVICES, ServiceSpec, Supervisor, with_identities
from o_runtime.nats_identity import NKEY_ENV, Identity
from o_setup import apply_topology
from tests.e2e.conftest import SECRETS_KEY, free_port
from tests.e2e.ops_support import o_ops
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "restored"


@dataclass
class Small:
    http: httpx.AsyncClient
    # What a process of this system is started with (the services', and o_ops' with the
    # operator's seed).
    env: dict[str, str]
    ops_env: dict[str, str]


@pytest.fixture(scope="module")
def llm_here() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.start()
    yield fake
    fake.stop()


def environment(servers: EmbeddedServers, llm: FakeOpenAI, port: int) -> dict[str, str]:
    assert servers.nats is not None and servers.postgres is not None
    # (Not this pytest process's NATS identity: these servers have keys of their own.)
    inherited = {k: v for k, v in os.environ.items() if k != NKEY_ENV}
    return {
        **inherited,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("contracts", "services", ".")),
        "NATS_URL": servers.nats.url,
        "DATABASE_URL": servers.postgres.url,
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "sk-test",
        "O_HTTP_PORT": str(port),
        "O_API_KEY": API_KEY,
        "O_LOG_LEVEL": "WARNING",
        "O_SECRETS_KEY": SECRETS_KEY,
    }


@contextlib.asynccontextmanager
async def servers_in(base: Path) -> AsyncIterator[EmbeddedServers]:
    with start_servers(base) as servers:
        yield servers


@contextlib.asynccontextmanager
async def services(
    servers: EmbeddedServers, env: dict[str, str]
) -> AsyncIterator[httpx.AsyncClient]:
    assert servers.nats is not None
    credentials = servers.nats.credentials
    setup = Identity.from_file("setup", credentials.seed_file("setup"))
    await apply_topology(servers.nats.url, setup, env)
    supervisor = Supervisor(
        with_identities(
            [ServiceSpec.module(s, f"o_{s}") for s in DEFAULT_SERVICES], credentials.seed_file
        ),
        env,
        backoff_initial=0.2,
    )
    await supervisor.start()
    http = httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{env['O_HTTP_PORT']}",
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=60,
    )
    try:
        await wait_healthy(http)
        yield http
    finally:
        await http.aclose()
        await supervisor.stop()


def ops_env(servers: EmbeddedServers, env: dict[str, str]) -> dict[str, str]:
    assert servers.nats is not None
    return {**env, NKEY_ENV: str(servers.nats.credentials.seed_file("operator"))}


async def ok(response: httpx.Response | Any) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


async def api_view(http: httpx.AsyncClient) -> dict[str, Any]:
    """Everything the API shows of the agents: themselves, blocks and their versions,
    messages, runs, archival passages."""
    agents = await ok(await http.get("/v1/agents/", params={"limit": 100, "order": "asc"}))
    view: dict[str, Any] = {"agents": agents}
    for agent in agents:
        a = agent["id"]
        blocks = await ok(await http.get(f"/v1/agents/{a}/core-memory/blocks"))
        view[a] = {
            "agent": await ok(await http.get(f"/v1/agents/{a}")),
            "blocks": blocks,
            "versions": {
                b["id"]: await ok(await http.get(f"/v1/blocks/{b['id']}/versions")) for b in blocks
            },
            "messages": await ok(await http.get(f"/v1/agents/{a}/messages", params={"limit": 100})),
            "runs": await ok(await http.get("/v1/runs/", params={"agent_id": a, "limit": 100})),
            "passages": await ok(
                await http.get(f"/v1/agents/{a}/archival-memory", params={"limit": 100})
            ),
        }
    return view


async def fill(http: httpx.AsyncClient, llm: FakeOpenAI) -> str:
    agent = await ok(
        await http.post(
            "/v1/agents/",
            json={
                "name": "kept",
                "model": "openai/gpt-4o-mini",
                "memory_blocks": [
                    {"label": "human", "value": "Name: Sam"},
                    {"label": "persona", "value": "Helpful."},
                ],
            },
        )
    )
    a = agent["id"]
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes tea"})]),
        Reply(content="Noted: tea."),
    )
    await ok(
        await http.post(
            f"/v1/agents/{a}/messages",
            json={"messages": [{"role": "user", "content": "I like tea"}]},
        )
    )
    blocks = await ok(await http.get(f"/v1/agents/{a}/core-memory/blocks"))
    persona = next(b for b in blocks if b["label"] == "persona")
    await ok(await http.patch(f"/v1/blocks/{persona['id']}", json={"value": "Terse."}))
    for text in ("the backup keeps passages", "and their vectors"):
        await ok(await http.post(f"/v1/agents/{a}/archival-memory", json={"text": text}))
    await ok(await http.post("/v1/agents/", json={"name": "second", "model": "openai/gpt-4o-mini"}))
    return str(a)


@pytest.fixture
def folders() -> Iterator[tuple[Path, Path, Path]]:
    # Not under pytest's tmp_path (another pytest session may make it private to Postgres).
    with (
        tempfile.TemporaryDirectory(prefix="o-before-") as before,
        tempfile.TemporaryDirectory(prefix="o-after-") as after,
        tempfile.TemporaryDirectory(prefix="o-backups-") as backups,
    ):
        yield Path(before), Path(after), Path(backups)


async def test_backup_wipe_restore_rebuild_gives_the_same_api_view(
    folders: tuple[Path, Path, Path], llm_here: FakeOpenAI
) -> None:
    before_dir, after_dir, backups = folders
    backup = backups / "o-backup"
    async with servers_in(before_dir) as servers:
        env = environment(servers, llm_here, free_port())
        async with services(servers, env) as http:
            agent_id = await fill(http, llm_here)
            before = await api_view(http)
            made = await o_ops(ops_env(servers, env), "backup", str(backup))
        assert made.code == 0, made.out + made.err
    # Wiped: that system's servers are stopped, its data folder and keys deleted.
    for item in before_dir.iterdir():
        shutil.rmtree(item) if item.is_dir() else item.unlink()
    manifest = json.loads((backup / "manifest.json").read_text())
    assert [s["name"] for s in manifest["streams"]][:2] == ["O_COMMANDS", "O_DEAD_LETTERS"]
    assert "O_EVENTS" in [s["name"] for s in manifest["streams"]]
    assert stat.S_IMODE(backup.stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in backup.iterdir()} == {0o600}

    async with servers_in(after_dir) as servers:
        env = environment(servers, llm_here, free_port())
        restored = await o_ops(ops_env(servers, env), "restore", str(backup))
        assert restored.code == 0, restored.out + restored.err
        assert "agents: replayed" in restored.out
        again = await o_ops(ops_env(servers, env), "restore", str(backup))
        assert again.code == 1
        assert "restore into an empty NATS" in again.err
        async with services(servers, env) as http:
            after = await api_view(http)
            assert after == before
            # And the restored agent goes on, its log continued.
            llm_here.push(Reply(content="Still here."))
            reply = await ok(
                await http.post(
                    f"/v1/agents/{agent_id}/messages",
                    json={"messages": [{"role": "user", "content": "still there?"}]},
                )
            )
            assert reply["messages"][-1]["content"] == "Still here."

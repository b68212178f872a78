"""Operator tasks against the running system: rebuilding projections from the log."""

from __future__ import annotations

import asyncio
import gzip
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from o_contracts import subjects
from tests.e2e.callback_receiver import receiving
from tests.e2e.conftest import System
from tests.e2e.folder_support import markdown, new_folder, processed, upload
from tests.e2e.support import caught_up, new_agent, send, subject_events
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

TABLES = {
    "agents": "id",
    "blocks": "id",
    "block_versions": "block_id, version",
    "agent_blocks": "agent_id, block_id",
    "messages": "id",
    "runs": "id",
    "steps": "id",
    "tools": "id",
    "mcp_servers": "id",
    "groups": "id",
    "providers": "id",
    "sleeptime_turns": "run_id",
    "evolution_history": "agent_id, seq",
    "evolution_config": "agent_id",
    "agent_versions": "agent_id, version_id",
    "evolution_proposals": "id",
    "evolution_cases": "proposal_id, n",
    "evolution_serving": "agent_id",
    "mcp_tools": "id",
    "mcp_oauth_sessions": "id",
    "passages": "id",
    "archives": "id",
    "archive_agents": "archive_id, agent_id",
    "identities": "id",
    "identity_agents": "identity_id, agent_id",
    "identity_blocks": "identity_id, block_id",
    "sandbox_configs": "id",
    "sandbox_env_vars": "id",
    "run_callbacks": "run_id",
    "schedules": "id",
    "schedule_fires": "schedule_id, slot",
    "schedule_commands": "command_id",
    "folders": "id",
    "folder_files": "id",
    "folder_file_chunks": "id",
    "agent_folders": "agent_id, folder_id",
    "agent_file_views": "agent_id, file_id",
    "agent_file_effects": "command_id",
    "projection_checkpoints": "projection",
}


def _plain(value: Any) -> Any:
    # pgvector values come back as numpy arrays, which do not compare with ==.
    return value.tolist() if hasattr(value, "tolist") else value


async def snapshot(dsn: str) -> dict[str, list[dict[str, Any]]]:
    conn = await asyncpg.connect(dsn)
    try:
        out = {}
        for table, order in TABLES.items():
            rows = await conn.fetch(f"SELECT * FROM {table} ORDER BY {order}")
            if table == "projection_checkpoints":
                # A checkpoint at 0 says no more than none: nothing applied yet.
                rows = [r for r in rows if r["last_seq"]]
            # updated_at and previous_seq of the checkpoint row are bookkeeping, not state.
            out[table] = [
                {
                    k: _plain(v)
                    for k, v in r.items()
                    if k not in ("updated_at", "previous_seq") or table != "projection_checkpoints"
                }
                for r in rows
            ]
        return out
    finally:
        await conn.close()


async def test_rebuild_from_the_log_gives_the_same_rows(system: System, llm: FakeOpenAI) -> None:
    tool = await system.http.post(
        "/v1/tools/",
        json={
            "source_code": 'def rebuilt(n: int) -> int:\n    """Twice n.\n\n    Args:\n'
            '        n: A number.\n    """\n    return 2 * n\n'
        },
    )
    assert tool.status_code == 200, tool.text
    mcp = await system.http.post(
        "/v1/mcp-servers/",
        json={
            "server_name": f"rebuilt-{uuid.uuid4().hex[:8]}",
            "config": {"mcp_server_type": "stdio", "command": "x", "args": [], "env": {"K": "v"}},
        },
    )
    assert mcp.status_code == 200, mcp.text
    agent = await new_agent(
        system, tool_ids=[tool.json()["id"]], embedding="openai/text-embedding-3-small"
    )
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "rebuild me"})]),
        Reply(content="ok"),
    )
    sent = await send(system, agent["id"], "before the rebuild")
    (run_id,) = sent["usage"]["run_ids"]
    called = await called_back(system, agent["id"])
    first_step = (
        await system.http.get(f"/v1/runs/{run_id}/steps", params={"order": "asc"})
    ).json()[0]
    rated = await system.http.patch(
        f"/v1/steps/{first_step['id']}/feedback", json={"feedback": "negative", "tags": ["rebuilt"]}
    )
    assert rated.status_code == 200, rated.text
    archive = f"/v1/agents/{agent['id']}/archival-memory"
    for text in ("rebuild keeps vectors", "rebuild keeps access times"):
        inserted = await system.http.post(archive, json={"text": text, "importance": 4})
        assert inserted.status_code == 200, inserted.text
    found = await system.http.get(f"{archive}/search", params={"query": "rebuild"})
    assert found.json()["count"] == 2
    await wait_for_access_recorded(system, archive)
    # An archive shared with the agent, and an identity it serves.
    shared = await system.http.post(
        "/v1/archives/",
        json={
            "name": f"rebuilt-{uuid.uuid4().hex[:8]}",
            "embedding": "openai/text-embedding-3-small",
        },
    )
    assert shared.status_code == 200, shared.text
    shared_id = shared.json()["id"]
    attached = await system.http.patch(f"/v1/agents/{agent['id']}/archives/attach/{shared_id}")
    assert attached.status_code == 200, attached.text
    put = await system.http.post(
        f"/v1/archives/{shared_id}/passages",
        json={"text": "rebuild keeps archives", "metadata": {"from": "test"}},
    )
    assert put.status_code == 200, put.text
    identity = await system.http.post(
        "/v1/identities/",
        json={
            "identifier_key": f"rebuilt-{uuid.uuid4().hex[:8]}",
            "name": "Rebuilt",
            "identity_type": "user",
            "agent_ids": [agent["id"]],
            "block_ids": [agent["memory"]["blocks"][0]["id"]],
            "properties": [{"key": "plan", "value": {"tier": 2}, "type": "json"}],
        },
    )
    assert identity.status_code == 200, identity.text
    # A sandbox configuration with a variable (e2b's: the local one would reach other tests'
    # tool runs).
    e2b = await system.http.post("/v1/sandbox-config/e2b/default")
    assert e2b.status_code == 200, e2b.text
    variable = await system.http.post(
        f"/v1/sandbox-config/{e2b.json()['id']}/environment-variable",
        json={"key": "REBUILT", "value": "kept", "description": "rebuild test"},
    )
    assert variable.status_code == 200, variable.text
    await scheduled(system, agent["id"])
    # An imported agent, whose history came in MessagesImported events.
    agent_file = Path(__file__).parents[1] / "fixtures/agent_files/loop.af.gz"
    imported = await system.http.post(
        "/v1/agents/import",
        files={"file": ("a.af", gzip.decompress(agent_file.read_bytes()), "application/json")},
        data={"model": "openai/gpt-4o-mini"},
    )
    assert imported.status_code == 200, imported.text
    (imported_id,) = imported.json()["agent_ids"]
    folder_id = await with_folders(system, agent["id"])
    await caught_up(system)
    before = await snapshot(system.env["DATABASE_URL"])
    assert len([r for r in before["messages"] if r["agent_id"] == imported_id]) == 3
    assert before["messages"] and before["runs"] and before["agents"] and before["passages"]
    rated_run = sorted(
        (r["step_number"], r["feedback"], r["tags"])
        for r in before["steps"]
        if r["run_id"] == run_id
    )
    assert [(feedback, tags) for _, feedback, tags in rated_run] == [
        ("negative", ["rebuilt"]),
        (None, []),
    ]
    assert before["mcp_servers"]
    assert [r["state"] for r in before["run_callbacks"] if r["run_id"] == called] == ["delivered"]
    assert before["schedule_fires"] and before["schedule_commands"]
    assert before["folder_file_chunks"] and before["agent_file_views"]
    # (Other tests' folders share the system: this test's has its kept file only.)
    assert [r["status"] for r in before["folder_files"] if r["folder_id"] == folder_id] == [
        "completed"
    ]

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "o_devtools.rebuild",
        env=system.env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert {line.split(":")[0] for line in out.decode().splitlines()} == {
        "agents",
        "archival",
        "memory",
        "runs",
        "tools",
        "mcp_servers",
        "groups",
        "providers",
        "identities",
        "sandbox_configs",
        "evolution",
        "callbacks",
        "schedules",
        "folders",
    }

    after = await snapshot(system.env["DATABASE_URL"])
    assert after == before
    # The system keeps working on the rebuilt projections.
    llm.push(Reply(content="still here"))
    result = await send(system, agent["id"], "after the rebuild")
    assert result["messages"][0]["content"] == "still here"


async def called_back(system: System, agent_id: str) -> str:
    """A run with a completion callback, delivered (a row of projection "callbacks")."""
    system.llm.push(Reply(content="calling back"))
    with receiving() as receiver:
        run = await system.http.post(
            f"/v1/agents/{agent_id}/messages/async",
            json={"messages": [{"role": "user", "content": "hi"}], "callback_url": receiver.url},
        )
        assert run.status_code == 200, run.text
        await asyncio.to_thread(receiver.wait_for, 1)
    run_id: str = run.json()["id"]
    async with asyncio.timeout(30):
        while True:
            shown = (await system.http.get(f"/v1/runs/{run_id}")).json()
            if shown["callback_status_code"] == 200:
                return run_id
            await asyncio.sleep(0.05)


async def scheduled(system: System, agent_id: str) -> None:
    """Schedules of every kind the projection keeps: one fired (its run finished), one
    changed twice, one deleted."""
    url = f"/v1/agents/{agent_id}/schedules"
    tick = [{"role": "user", "content": "scheduled before the rebuild"}]
    at = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    once = await system.http.post(url, json={"at": at, "messages": tick})
    assert once.status_code == 201, once.text
    daily = (await system.http.post(url, json={"cron": "0 7 * * *", "messages": tick})).json()
    for change in ({"enabled": False}, {"name": "daily", "missed": "skip"}):
        changed = await system.http.patch(f"{url}/{daily['id']}", json=change)
        assert changed.status_code == 200, changed.text
    gone = (await system.http.post(url, json={"cron": "0 8 * * *", "messages": tick})).json()
    assert (await system.http.delete(f"{url}/{gone['id']}")).status_code == 200
    async with subject_events(system, subjects.schedule_subject(once.json()["id"])) as fires:
        fired = await fires.wait_until(lambda e: e.type == "ScheduleFired")
    async with subject_events(system, subjects.agent_subject(agent_id)) as events:
        await events.wait_until(
            lambda e: e.type == "RunCompleted" and e.data.run_id == fired.data.run_id
        )


async def with_folders(system: System, agent_id: str) -> str:
    """A folder renamed, with a file processed and one deleted, attached to the agent
    (which opens its file), a window moved and another folder attached and detached."""
    folder = await new_folder(system, embedding="openai/text-embedding-3-small")
    renamed = await system.http.patch(
        f"/v1/folders/{folder['id']}", json={"description": "rebuilt"}
    )
    assert renamed.status_code == 200, renamed.text
    kept = await upload(
        system, folder["id"], "kept.md", markdown(["one", "two"]).encode(), "text/markdown"
    )
    gone = await upload(system, folder["id"], "gone.txt", b"Deleted.\n", "text/plain")
    for f in (kept, gone):
        assert (await processed(system, folder["id"], f["id"]))["processing_status"] == "completed"
    deleted = await system.http.delete(f"/v1/folders/{folder['id']}/{gone['id']}")
    assert deleted.status_code == 204, deleted.text
    agents_url = f"/v1/agents/{agent_id}"
    attached = await system.http.patch(f"{agents_url}/folders/attach/{folder['id']}")
    assert attached.status_code == 200, attached.text
    other = await new_folder(system)
    for step in ("attach", "detach"):
        changed = await system.http.patch(f"{agents_url}/folders/{step}/{other['id']}")
        assert changed.status_code == 200, changed.text
    closed = await system.http.patch(f"{agents_url}/files/{kept['id']}/close")
    assert closed.status_code == 200, closed.text
    opened = await system.http.patch(f"{agents_url}/files/{kept['id']}/open")
    assert opened.status_code == 200, opened.text
    return str(folder["id"])


async def wait_for_access_recorded(system: System, archive: str) -> None:
    """Searches record access asynchronously (one PassagesAccessed event); wait for it."""
    async with asyncio.timeout(10):
        while True:
            rows = (await system.http.get(archive)).json()
            if all(r["metadata"]["last_accessed_at"] > r["created_at"] for r in rows):
                return
            await asyncio.sleep(0.05)


async def test_unknown_projection_is_refused(system: System) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "o_devtools.rebuild",
        "nope",
        env=system.env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert "unknown projection(s): nope" in err.decode()

"""`python -m o_ops agents export` / `import`: an agent file (.af) through the HTTP API, as
the gateway writes and reads it (docs/agent-files.md)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.e2e.conftest import System
from tests.e2e.ops_support import o_ops
from tests.e2e.support import new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


async def test_an_agent_exported_to_a_file_imports_as_a_copy_with_its_memory_and_history(
    system: System, llm: FakeOpenAI, tmp_path: Path
) -> None:
    name = f"filed-{uuid.uuid4().hex[:8]}"
    agent = await new_agent(system, name=name)
    llm.push(Reply(content="Tea it is."))
    await send(system, agent["id"], "I like tea")
    file = tmp_path / "agent.af"

    exported = await o_ops(system.env, "agents", "export", agent["id"], "-o", str(file))
    assert exported.code == 0, exported.err
    written = json.loads(file.read_text())
    assert [a["name"] for a in written["agents"]] == [name]

    imported = await o_ops(system.env, "agents", "import", str(file), "--name", f"{name}-copy")
    assert imported.code == 0, imported.err
    (copy_id,) = imported.out.split()
    assert copy_id != agent["id"]
    copy = (await system.http.get(f"/v1/agents/{copy_id}")).json()
    assert copy["name"] == f"{name}-copy"
    assert sorted((b["label"], b["value"]) for b in copy["memory"]["blocks"]) == sorted(
        (b["label"], b["value"]) for b in agent["memory"]["blocks"]
    )
    history = (await system.http.get(f"/v1/agents/{copy_id}/messages")).json()
    assert [m.get("content") for m in history if m["message_type"] == "assistant_message"][-1:] == [
        "Tea it is."
    ]


async def test_export_to_stdout_and_refusals_say_the_apis_detail(system: System) -> None:
    agent = await new_agent(system)
    printed = await o_ops(system.env, "agents", "export", agent["id"], "--scrub-messages")
    assert printed.code == 0, printed.err
    assert json.loads(printed.out)["agents"][0]["name"] == agent["name"]
    missing = f"agent-{uuid.uuid4()}"
    refused = await o_ops(system.env, "agents", "export", missing)
    assert refused.code == 1
    assert refused.err.strip() == f"export refused: 404: Agent {missing} not found"
    no_key = await o_ops({**system.env, "O_API_KEY": ""}, "agents", "export", agent["id"])
    assert no_key.code == 1
    assert no_key.err.startswith("export refused: 401: invalid or missing API key")

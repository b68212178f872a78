"""Planning an import of an agent file with folders, files and MCP servers (pure: no
server): what is written for them, what is left out, and which files are refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import HTTPException

from o_contracts.base_tools import FILE_TOOLS
from o_contracts.events import FolderAttached
from o_contracts.ids import derived_id
from o_gateway.agent_files.mcp_plan import mcp_server_id_of
from o_gateway.agent_files.plan import ImportOptions, ImportPlan, Registry, plan_import
from o_gateway.agent_files.reading import read_agent_file
from o_gateway.mcp_tools import offered
from o_runtime import llm_providers
from o_runtime.content_store import digest
from o_runtime.mcp_client import OfferedTool

IMPORT = "cmd-import-1"
NOTES = "# Notes\n\nFirst sentence. Second sentence.\n"
LOOKUP_SCHEMA = {
    "name": "lookup",
    "description": "Look a word up.",
    "parameters": {
        "type": "object",
        "properties": {"word": {"type": "string"}},
        "required": ["word"],
    },
}


@pytest.fixture(autouse=True)
def _openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The providers are read from the environment once per process: an earlier test may have
    # read an environment without this key, and later ones must not see it.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    llm_providers._from_environ.cache_clear()
    yield
    llm_providers._from_environ.cache_clear()


def document() -> dict[str, Any]:
    return {
        "agents": [
            {
                "id": "agent-0",
                "name": "reader",
                "agent_type": "letta_v1_agent",
                "llm_config": {"handle": "openai/gpt-4o-mini", "context_window": 128000},
                "tool_ids": ["tool-0"],
                "source_ids": ["source-0"],
                "files_agents": [
                    {
                        "id": "file_agent-9",
                        "agent_id": "agent-0",
                        "file_id": "file-0",
                        "source_id": "source-0",
                        "file_name": "handbook/notes.md",
                        "is_open": False,
                    }
                ],
                "messages": [],
                "in_context_message_ids": [],
            }
        ],
        "blocks": [],
        "groups": [],
        "tools": [
            {
                "id": "tool-0",
                "name": "lookup",
                "tool_type": "external_mcp",
                "description": "Look a word up.",
                "json_schema": LOOKUP_SCHEMA,
                "tags": ["mcp:dictionary"],
                "metadata_": {"mcp": {"server_name": "dictionary", "server_id": "mcp_server-x"}},
            }
        ],
        "mcp_servers": [
            {
                "id": "mcp_server-0",
                "server_type": "stdio",
                "server_name": "dictionary",
                "server_url": None,
                "stdio_config": {
                    "server_name": "dictionary",
                    "type": "stdio",
                    "command": "/opt/dict/bin/python",
                    "args": ["-m", "dict_server"],
                },
            }
        ],
        "sources": [
            {
                "id": "source-0",
                "name": "handbook",
                "description": "the team's handbook",
                "instructions": "read it first",
                "embedding_config": None,
            }
        ],
        "files": [
            {
                "id": "file-0",
                "source_id": "source-0",
                "file_name": "handbook/notes.md",
                "original_file_name": "notes.md",
                "file_type": "text/markdown",
                "file_size": 4321,
                "processing_status": "completed",
                "content": NOTES,
            },
            {
                "id": "file-1",
                "source_id": "source-0",
                "file_name": "handbook/report.pdf",
                "original_file_name": "report.pdf",
                "file_type": "application/pdf",
                "processing_status": "completed",
                "content": "Revenue grew.",
            },
            {
                "id": "file-2",
                "source_id": "source-0",
                "file_name": "handbook/notes_(1).md",
                "original_file_name": "notes.md",
                "file_type": "text/markdown",
                "processing_status": "completed",
                "content": "Another notes file.",
            },
            {
                "id": "file-3",
                "source_id": "source-0",
                "file_name": "handbook/late.md",
                "original_file_name": "late.md",
                "processing_status": "embedding",
                "content": None,
            },
        ],
        "skills": [],
    }


def planned(
    data: dict[str, Any],
    registry: Registry | None = None,
    options: ImportOptions | None = None,
    import_id: str = IMPORT,
) -> ImportPlan:
    file = read_agent_file(json.dumps(data).encode(), 1 << 20)
    return plan_import(
        file, options or ImportOptions(), registry or Registry({}, {}), import_id, None
    )


def refused(data: dict[str, Any], registry: Registry | None = None) -> HTTPException:
    with pytest.raises(HTTPException) as caught:
        planned(data, registry)
    return caught.value


def test_a_folder_is_created_with_each_file_that_has_text_as_an_upload_of_its_text() -> None:
    plan = planned(document())
    (folder,) = plan.folders
    folder_id = derived_id("source", IMPORT, "source-0")
    assert (folder.event.folder_id, folder.event.name) == (folder_id, "handbook")
    assert (folder.event.description, folder.event.instructions) == (
        "the team's handbook",
        "read it first",
    )
    # No embedder named: the local one, as a folder created without one.
    assert folder.event.embedding_config["handle"] == "local/all-MiniLM-L6-v2"
    uploads = [
        (f.event.file_name, f.event.original_file_name, f.event.file_type) for f in folder.files
    ]
    assert uploads == [
        ("handbook/notes.md", "notes.md", "text/markdown"),
        ("handbook/report.pdf", "report.pdf", "application/pdf"),
        ("handbook/notes_(1).md", "notes.md", "text/markdown"),
    ]
    notes = folder.files[0]
    assert notes.data == NOTES.encode()
    assert notes.event.sha256 == digest(NOTES.encode())
    assert notes.event.file_size == 4321  # the original file's size, as exported
    assert notes.event.file_id == derived_id("file", IMPORT, "file-0")
    # Every file arrives as its text: a PDF's text is read as text, not as a PDF.
    assert all(f.event.parsed_text for f in folder.files)
    assert any(
        "file 'handbook/late.md' (file-3)" in note and "embedding" in note for note in plan.left_out
    )


def test_the_agent_is_attached_to_its_folders_after_creation_with_the_file_tools() -> None:
    plan = planned(document())
    (agent,) = plan.agents
    (attached,) = agent.folders
    assert attached == FolderAttached(
        agent_id=agent.command.agent_id,
        folder_id=derived_id("source", IMPORT, "source-0"),
        tools=[*agent.command.tools, *FILE_TOOLS],
    )


def test_a_folder_named_like_one_here_gets_a_suffix_that_a_retry_repeats() -> None:
    taken = Registry({}, {}, folder_names={"handbook"})
    first, again = planned(document(), taken), planned(document(), taken)
    name = first.folders[0].event.name
    assert name.startswith("handbook_") and len(name) == len("handbook_") + 8
    assert again.folders[0].event.name == name
    other = planned(document(), taken, import_id="cmd-import-2")
    assert other.folders[0].event.name != name


def test_the_import_embedding_replaces_the_folders_as_it_replaces_the_agents() -> None:
    data = document()
    data["sources"][0]["embedding_config"] = {"handle": "openai/text-embedding-3-small"}
    plan = planned(data, options=ImportOptions(embedding="local/all-MiniLM-L6-v2"))
    assert plan.folders[0].event.embedding_config["handle"] == "local/all-MiniLM-L6-v2"
    kept = planned(data)
    assert kept.folders[0].event.embedding_config["handle"] == "openai/text-embedding-3-small"


def test_a_server_not_registered_here_is_registered_with_the_tools_the_file_lists() -> None:
    plan = planned(document())
    (server,) = plan.mcp_servers
    server_id = mcp_server_id_of(IMPORT, "mcp_server-0")
    assert server.created.model_dump(exclude={"mcp_server_id"}) == {
        "server_name": "dictionary",
        "server_type": "stdio",
        "command": "/opt/dict/bin/python",
        "args": ["-m", "dict_server"],
        "server_url": None,
        "auth_header": None,
        "encrypted_auth_token": None,
        "encrypted_custom_headers": None,
        "encrypted_env": None,
    }
    assert server.synced is not None
    (tool,) = server.synced.tools
    # The id a live listing of the server gives the same tool: a refresh keeps it.
    live = offered(server_id, OfferedTool("lookup", "Look a word up.", LOOKUP_SCHEMA["parameters"]))
    assert (tool.tool_id, tool.json_schema) == (live.tool_id, live.json_schema)
    (agent,) = plan.agents
    assert [(t.id, t.name) for t in agent.command.user_tools] == [(live.tool_id, "lookup")]
    assert any("'dictionary'" in n and "without a token" in n for n in plan.left_out)


def test_a_server_registered_here_under_the_name_is_used_as_it_is() -> None:
    row = {
        "id": "mcp_server-here",
        "server_type": "streamable_http",
        "server_url": "https://dict.example.com/mcp",
        "command": None,
        "args": [],
    }
    registry = Registry(
        {}, {("dictionary", "lookup"): {"id": "tool-here"}}, mcp_servers={"dictionary": row}
    )
    plan = planned(document(), registry)
    assert plan.mcp_servers == []
    (agent,) = plan.agents
    assert [t.id for t in agent.command.user_tools] == ["tool-here"]
    # Its address is not the file's: the import says it was not applied.
    assert any("registered here (mcp_server-here)" in n for n in plan.left_out)


def test_a_file_server_at_a_private_address_is_refused_unless_the_operator_allows_it() -> None:
    data = document()
    data["mcp_servers"][0] |= {
        "server_type": "streamable_http",
        "server_url": "http://127.0.0.1:9000/mcp",
        "stdio_config": None,
    }
    error = refused(data)
    assert error.status_code == 422
    assert "MCP server 'dictionary' (mcp_server-0)" in str(error.detail)
    allowed = planned(data, Registry({}, {}, allow_private_mcp_urls=True))
    assert allowed.mcp_servers[0].created.server_url == "http://127.0.0.1:9000/mcp"


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        (lambda d: d["files"][0].update(source_id="source-7"), "names source 'source-7'"),
        (
            lambda d: d["agents"][0]["files_agents"][0].update(file_id="file-9"),
            "names file 'file-9'",
        ),
        (
            lambda d: d["agents"][0]["files_agents"][0].update(agent_id="agent-5"),
            "another agent, 'agent-5'",
        ),
        (lambda d: d["agents"][0].update(folder_ids=["source-3"]), "names source 'source-3'"),
        (lambda d: d["sources"].append({**d["sources"][0], "id": "source-1"}), "two folders"),
        (
            lambda d: d["mcp_servers"][0].update(server_type="websocket"),
            "server_type 'websocket'",
        ),
        (lambda d: d["mcp_servers"][0]["stdio_config"].pop("command"), "command"),
        (lambda d: d["tools"][0].update(json_schema=None), "has no json_schema"),
    ],
)
def test_inconsistent_folders_files_and_servers_refuse_the_file(change: Any, detail: str) -> None:
    data = document()
    change(data)
    error = refused(data)
    assert error.status_code == 422
    assert detail in str(error.detail)


def test_skills_are_read_and_left_to_the_client_and_a_malformed_one_is_refused() -> None:
    data = document()
    data["skills"] = [{"name": "notes", "files": {"SKILL.md": "# Notes"}}]
    plan = planned(data)
    assert "1 skills: skills are the client's; the server keeps none" in plan.left_out
    data["skills"] = [{"name": "broken", "files": {"README.md": "no skill file"}}]
    with pytest.raises(HTTPException) as caught:
        read_agent_file(json.dumps(data).encode(), 1 << 20)
    assert caught.value.status_code == 422
    assert "SKILL.md" in json.dumps(caught.value.detail)

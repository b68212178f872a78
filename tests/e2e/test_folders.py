"""Folders and files as a Letta app uses them, through the official SDK where it reaches:
upload documents made by the test, see them processed, attach the folder to an agent,
and watch the agent read them with the files tools.

Processing runs after the upload is answered (the memory service's worker), so the
tests wait for a file's status; a worker killed halfway still ends the file
`completed` with every chunk once.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from letta_client import Letta

from tests.e2e.conftest import System
from tests.e2e.folder_support import (
    agent_files,
    markdown,
    new_folder,
    processed,
    upload,
)
from tests.e2e.support import new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.pdf_fixture import tiny_pdf

pytestmark = pytest.mark.e2e

# Hash-based vectors from the fake OpenAI server: fast, where meaning does not matter.
FAKE_EMBEDDING = "openai/text-embedding-3-small"


def sdk_wait(client: Letta, folder_id: str, file_id: str) -> Any:
    """The SDK's view of a file once processed (polled: processing is asynchronous)."""
    import time

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        file = client.folders.files.retrieve(file_id, folder_id=folder_id)
        if file.processing_status in ("completed", "error"):
            return file
        time.sleep(0.05)
    raise AssertionError(f"file {file_id} not processed in time")


def _upload_and_process(system: System) -> dict[str, Any]:
    client = system.client()
    folder = client.folders.create(
        name="handbook-sdk-" + os.urandom(3).hex(), embedding=FAKE_EMBEDDING
    )
    notes = markdown(["onboarding", "holidays", "security"]).encode()
    md = client.folders.files.upload(folder.id, file=("notes.md", notes, "text/markdown"))
    pdf_bytes = tiny_pdf([["Quarterly report (draft)", "Revenue grew 12 percent."], ["End."]])
    pdf = client.folders.files.upload(folder.id, file=("report.pdf", pdf_bytes, "application/pdf"))
    return {
        "folder": folder,
        "uploaded": (md, pdf),
        "done": (sdk_wait(client, folder.id, md.id), sdk_wait(client, folder.id, pdf.id)),
        "listed": list(client.folders.files.list(folder.id, order="asc")),
        "with_content": client.folders.files.retrieve(
            pdf.id, folder_id=folder.id, include_content=True
        ),
    }


async def test_a_markdown_file_and_a_pdf_are_processed_to_completed_with_their_chunks(
    system: System,
) -> None:
    seen = await asyncio.to_thread(_upload_and_process, system)
    folder = seen["folder"]
    md, pdf = seen["uploaded"]
    # The upload is answered before any processing: its name carries the folder's.
    assert md.processing_status == "pending" and md.file_name == f"{folder.name}/notes.md"
    assert (pdf.file_type, pdf.file_name) == ("application/pdf", f"{folder.name}/report.pdf")
    assert md.file_size == len(markdown(["onboarding", "holidays", "security"]).encode())
    done_md, done_pdf = seen["done"]
    assert (done_md.processing_status, done_md.total_chunks, done_md.chunks_embedded) == (
        "completed",
        3,
        3,
    )
    assert (done_pdf.processing_status, done_pdf.total_chunks, done_pdf.chunks_embedded) == (
        "completed",
        1,
        1,
    )
    assert [(f.file_name, f.file_type) for f in seen["listed"]] == [
        ("notes.md", "text/markdown"),
        ("report.pdf", "application/pdf"),
    ]
    assert seen["with_content"].content == (
        "Quarterly report (draft)\nRevenue grew 12 percent.\n\nEnd."
    )
    passages = await system.http.get(f"/v1/folders/{folder.id}/passages", params={"order": "asc"})
    assert [p["file_name"] for p in passages.json()] == [f"{folder.name}/notes.md"] * 3 + [
        f"{folder.name}/report.pdf"
    ]
    # The same folder under Letta's older names.
    source = await system.http.get(f"/v1/sources/{folder.id}")
    assert source.status_code == 200 and source.json()["name"] == folder.name
    by_name = await system.http.get(f"/v1/folders/name/{folder.name}")
    assert by_name.json() == folder.id


def _files_tools(request: dict[str, Any]) -> list[str]:
    names = [t["function"]["name"] for t in request.get("tools") or []]
    return [n for n in names if n in ("open_files", "grep_files", "semantic_search_files")]


def _tool_result(request: dict[str, Any]) -> str:
    content = request["messages"][-1]["content"]
    text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return str(parsed.get("message", text)) if isinstance(parsed, dict) else text


async def test_an_attached_folder_shows_as_file_blocks_and_the_files_tools_read_it(
    system: System, llm: FakeOpenAI
) -> None:
    folder = await new_folder(system, description="Team handbook", instructions="Cite files.")
    name = folder["name"]
    text = markdown(["onboarding", "the vault", "tea breaks"]).replace(
        "Sentence 3 of section 1 is about the vault",
        "Sentence 3 of section 1 says the vault code is ZX-9471, about the vault",
    )
    up = await upload(system, folder["id"], "notes.md", text.encode(), "text/markdown")
    assert (await processed(system, folder["id"], up["id"]))["processing_status"] == "completed"
    agent = await new_agent(system)
    client = system.client()
    attached = await asyncio.to_thread(
        client.agents.folders.attach, folder["id"], agent_id=agent["id"]
    )
    assert attached is not None and [s.id for s in attached.sources] == [folder["id"]]
    assert {t.name for t in attached.tools} >= {"open_files", "grep_files", "semantic_search_files"}
    (listed,) = await agent_files(system, agent["id"])
    assert (listed["file_name"], listed["folder_name"], listed["is_open"]) == (
        f"{name}/notes.md",
        name,
        True,
    )

    llm.push(
        Reply(tool_calls=[("grep_files", {"pattern": r"ZX-\d+"})]),
        Reply(tool_calls=[("semantic_search_files", {"query": "tea breaks", "limit": 1})]),
        Reply(
            tool_calls=[
                (
                    "open_files",
                    {
                        "file_requests": [
                            {"file_name": f"{name}/notes.md", "offset": 0, "length": 2}
                        ]
                    },
                )
            ]
        ),
        Reply(content="Read it."),
    )
    result = await send(system, agent["id"], "What is the vault code?")
    assert result["messages"][-1]["content"] == "Read it."
    first, after_grep, after_search, after_open = llm.requests[-4:]
    system_prompt = first["messages"][0]["content"]
    assert _files_tools(first) == ["open_files", "grep_files", "semantic_search_files"]
    assert f'<directory name="{name}">\n<description>Team handbook</description>\n' in system_prompt
    assert "<instructions>Cite files.</instructions>" in system_prompt
    assert f'<file status="open" name="{name}/notes.md">' in system_prompt
    # Markdown is shown a sentence a line (a heading joins the sentence after it, as Letta's).
    assert (
        "[Viewing file start (out of 43 sentences)]\n1: ## Section 0: onboarding Sentence 0"
        in system_prompt
    )

    grep = _tool_result(after_grep)
    assert grep.startswith("Found 1 total matches across 1 files (showing matches 1-1 of 1)")
    assert f"=== {name}/notes.md:18 ===" in grep
    assert "> 18: Sentence 3 of section 1 says the vault code is ZX-9471" in grep
    assert "  17: Sentence 2 of section 1" in grep and "  19: Sentence 4 of section 1" in grep

    found = _tool_result(after_search)
    assert found.startswith("Found 1 semantic matches in 1 file for query: 'tea breaks'")
    assert "Section 2: tea breaks" in found

    # Attaching opened the whole file; the window moved.
    assert (
        _tool_result(after_open) == f"* Opened {name}/notes.md (lines 1-2) (previously full file)"
    )
    window = after_open["messages"][0]["content"]
    assert "[Viewing sentences 1 to 2 (out of 43 sentences)]\n1: ## Section 0: onboarding" in window
    assert "2: Sentence 1 of section 0" in window and "3: Sentence 2 of section 0" not in window

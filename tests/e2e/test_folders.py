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
import signal
import time
from typing import Any

import asyncpg
import nats
import nats.js.errors
import pytest
from letta_client import Letta

from o_contracts import subjects
from o_contracts.envelope import decode
from o_contracts.events import FileChunksEmbedded
from tests.e2e.conftest import System
from tests.e2e.folder_support import (
    agent_files,
    markdown,
    new_folder,
    processed,
    processed_up_to,
    upload,
)
from tests.e2e.support import new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.pdf_fixture import tiny_pdf
from tests.servers import operator

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


async def test_an_upload_over_the_limit_is_413_and_an_unsupported_type_415(
    system: System,
) -> None:
    folder = await new_folder(system)
    limit = int(system.env["O_MAX_FILE_BYTES"])
    over = await system.http.post(
        f"/v1/folders/{folder['id']}/upload",
        files={"file": ("big.txt", b"a" * (limit + 1), "text/plain")},
    )
    assert over.status_code == 413
    assert over.json() == {
        "detail": f"the file is over the upload limit of {limit} bytes (O_MAX_FILE_BYTES)"
    }
    # Far over it (more than the multipart room): refused before the body is read.
    far = await system.http.post(
        f"/v1/sources/{folder['id']}/upload",
        files={"file": ("big.txt", b"a" * (2 * limit), "text/plain")},
    )
    assert far.status_code == 413 and "O_MAX_FILE_BYTES" in far.json()["detail"]
    exe = await system.http.post(
        f"/v1/folders/{folder['id']}/upload",
        files={"file": ("tool.exe", b"MZ\x90\x00", "application/x-msdownload")},
    )
    assert exe.status_code == 415
    assert exe.json()["detail"].startswith(
        "Unsupported file type: application/x-msdownload (filename: tool.exe). Supported types:"
    )
    # Nothing was recorded for either.
    files = await system.http.get(f"/v1/folders/{folder['id']}/files")
    assert files.json() == []
    # Exactly the limit is taken.
    at = await upload(system, folder["id"], "at.txt", b"a" * limit, "text/plain")
    assert at["file_size"] == limit


async def _chunk_rows(system: System, folder_id: str) -> list[tuple[str, int]]:
    conn = await asyncpg.connect(system.env["DATABASE_URL"])
    try:
        rows = await conn.fetch(
            "SELECT file_id, idx FROM folder_file_chunks WHERE folder_id = $1"
            " ORDER BY file_id, idx",
            folder_id,
        )
    finally:
        await conn.close()
    return [(r["file_id"], r["idx"]) for r in rows]


async def test_deleting_a_file_and_then_its_folder_removes_their_chunks_and_detaches_it(
    system: System,
) -> None:
    folder = await new_folder(system)
    kept = await upload(
        system, folder["id"], "kept.md", markdown(["a", "b"]).encode(), "text/markdown"
    )
    gone = await upload(system, folder["id"], "gone.txt", b"Only line.\n", "text/plain")
    for f in (kept, gone):
        assert (await processed(system, folder["id"], f["id"]))["processing_status"] == "completed"
    agent = await new_agent(system)
    attach = await system.http.patch(f"/v1/agents/{agent['id']}/folders/attach/{folder['id']}")
    assert attach.status_code == 200, attach.text
    assert sorted(await _chunk_rows(system, folder["id"])) == sorted(
        [(kept["id"], 0), (kept["id"], 1), (gone["id"], 0)]
    )

    deleted = await system.http.delete(f"/v1/folders/{folder['id']}/{gone['id']}")
    assert deleted.status_code == 204
    assert await _chunk_rows(system, folder["id"]) == [(kept["id"], 0), (kept["id"], 1)]
    assert [f["file_id"] for f in await agent_files(system, agent["id"])] == [kept["id"]]
    missing = await system.http.get(f"/v1/folders/{folder['id']}/files/{gone['id']}")
    assert missing.status_code == 404

    assert (await system.http.delete(f"/v1/folders/{folder['id']}")).status_code == 200
    assert await _chunk_rows(system, folder["id"]) == []
    assert (await system.http.get(f"/v1/folders/{folder['id']}")).status_code == 404
    assert (await system.http.get(f"/v1/agents/{agent['id']}/folders")).json() == []
    assert await agent_files(system, agent["id"]) == []
    shown = await system.http.get(f"/v1/agents/{agent['id']}")
    assert shown.json()["sources"] == []


async def _chunk_indices_in_the_log(system: System, folder_id: str, file_id: str) -> list[int]:
    """Every chunk index recorded by FileChunksEmbedded on the file's subject, in order."""
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    js = nc.jetstream()
    indices: list[int] = []
    seq = 1
    try:
        while True:
            try:
                msg = await js.get_msg(
                    subjects.EVENTS_STREAM,
                    seq=seq,
                    subject=subjects.file_subject(folder_id, file_id),
                    next=True,
                )
            except nats.js.errors.NotFoundError:
                return indices
            event = decode(msg.data or b"").data
            if isinstance(event, FileChunksEmbedded):
                indices += [c.index for c in event.chunks]
            seq = int(msg.seq or 0) + 1
    finally:
        await nc.close()


async def test_a_memory_service_killed_mid_file_leaves_it_completed_with_each_chunk_once(
    system: System, llm: FakeOpenAI
) -> None:
    client = system.client()
    folder = await asyncio.to_thread(
        client.folders.create, name="killed-" + os.urandom(3).hex(), embedding=FAKE_EMBEDDING
    )
    topics = [f"topic {n}" for n in range(24)]
    # 24 chunks in batches of 4 (O_FILE_EMBED_BATCH): answer two batches, hold the third.
    llm.hold_embeddings_after(2)
    try:
        up = await upload(system, folder.id, "long.md", markdown(topics).encode(), "text/markdown")
        assert await asyncio.to_thread(llm.wait_for_embedding_requests, 3)
        before = await processed_up_to(system, folder.id, up["id"], 8)
        assert (before["processing_status"], before["total_chunks"]) == ("embedding", 24)
        memory = system.supervisor.pids("memory")
        restarts = system.supervisor.restart_count("memory")
        killed_at = time.perf_counter()
        for pid in memory:
            os.kill(pid, signal.SIGKILL)
        await asyncio.wait_for(
            system.supervisor.wait_for_restarts("memory", restarts + len(memory)), 60
        )
    finally:
        llm.release_embeddings()
    done = await processed(system, folder.id, up["id"])
    took = time.perf_counter() - killed_at
    assert (done["processing_status"], done["total_chunks"], done["chunks_embedded"]) == (
        "completed",
        24,
        24,
    )
    # The restarted service took the file over from its dead predecessor at once (its
    # holdings: o_runtime/takeover.py), not after O_FILES_ACK_WAIT (30 s here).
    assert took < 15, took
    assert await _chunk_indices_in_the_log(system, folder.id, up["id"]) == list(range(24))
    assert await _chunk_rows(system, folder.id) == [(up["id"], i) for i in range(24)]
    passages = await system.http.get(
        f"/v1/folders/{folder.id}/passages", params={"order": "asc", "limit": 100}
    )
    assert [p["text"].strip().split("\n", 1)[0] for p in passages.json()] == [
        f"## Section {n}: topic {n}" for n in range(24)
    ]

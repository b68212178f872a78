"""What the folders tests share: documents made by the tests, folders with processed
files, and waiting for processing (which runs after the upload has been answered)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.e2e.conftest import System

DEADLINE = 90.0


def section(n: int, topic: str) -> str:
    """One markdown section of about 1,000 characters: sentences about `topic`."""
    sentences = [f"## Section {n}: {topic}"] + [
        f"Sentence {i} of section {n} is about {topic} and nothing else at all." for i in range(15)
    ]
    return "\n".join(sentences)


def markdown(topics: list[str]) -> str:
    """Sections separated by blank lines; each is one chunk at the default chunk size
    (300 tokens, ~1,200 characters: two sections never fit in one)."""
    return "\n\n".join(section(n, t) for n, t in enumerate(topics)) + "\n"


async def new_folder(system: System, **body: Any) -> dict[str, Any]:
    import uuid

    response = await system.http.post(
        "/v1/folders/", json={"name": f"docs-{uuid.uuid4().hex[:8]}", **body}
    )
    assert response.status_code == 200, response.text
    folder: dict[str, Any] = response.json()
    return folder


async def upload(
    system: System, folder_id: str, name: str, data: bytes, content_type: str, **params: Any
) -> dict[str, Any]:
    response = await system.http.post(
        f"/v1/folders/{folder_id}/upload",
        files={"file": (name, data, content_type)},
        params=params,
    )
    assert response.status_code == 200, response.text
    uploaded: dict[str, Any] = response.json()
    return uploaded


async def processed(system: System, folder_id: str, file_id: str) -> dict[str, Any]:
    """The file once its processing has ended (completed or error), polled."""
    async with asyncio.timeout(DEADLINE):
        while True:
            response = await system.http.get(f"/v1/folders/{folder_id}/files/{file_id}")
            assert response.status_code == 200, response.text
            file: dict[str, Any] = response.json()
            if file["processing_status"] in ("completed", "error"):
                return file
            await asyncio.sleep(0.05)


async def agent_files(system: System, agent_id: str) -> list[dict[str, Any]]:
    response = await system.http.get(f"/v1/agents/{agent_id}/files", params={"order": "asc"})
    assert response.status_code == 200, response.text
    files: list[dict[str, Any]] = response.json()["files"]
    return files


async def open_files_of(system: System, agent_id: str, count: int) -> list[dict[str, Any]]:
    """The agent's files once `count` of them are open (a processed file opens for the
    agents of its folder right after its processing), polled."""
    async with asyncio.timeout(DEADLINE):
        while True:
            files = await agent_files(system, agent_id)
            if sum(f["is_open"] for f in files) >= count:
                return files
            await asyncio.sleep(0.05)


async def processed_up_to(
    system: System, folder_id: str, file_id: str, chunks: int
) -> dict[str, Any]:
    """The file once at least `chunks` of its chunks are embedded (or it ended), polled."""
    async with asyncio.timeout(DEADLINE):
        while True:
            response = await system.http.get(f"/v1/folders/{folder_id}/files/{file_id}")
            assert response.status_code == 200, response.text
            file: dict[str, Any] = response.json()
            if (file["chunks_embedded"] or 0) >= chunks or file["processing_status"] in (
                "completed",
                "error",
            ):
                return file
            await asyncio.sleep(0.05)

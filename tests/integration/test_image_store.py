"""The images object store: content-addressed puts happen once, and images outlive a
killed nats-server (file storage, as the log)."""

from __future__ import annotations

import asyncio
import base64
import os
import signal

import pytest

from o_contracts.subjects import IMAGES_BUCKET
from o_devtools.embedded import EmbeddedNats
from o_devtools.supervisor import ServerKeeper
from o_executor.images import STORED_IMAGE, inline_images
from o_runtime.eventlog import EventLog
from o_runtime.images import ImageMissing, Images, digest
from tests.integration.conftest import server_operator

DEADLINE = 20.0


async def stored_messages(eventlog: EventLog) -> int:
    info = await eventlog.js.stream_info(f"OBJ_{IMAGES_BUCKET}")
    return info.state.messages


async def test_an_image_is_put_once_and_survives_a_killed_nats_server(
    nats_keeper: ServerKeeper,
) -> None:
    server = nats_keeper.server
    assert isinstance(server, EmbeddedNats)
    data = os.urandom(700 * 1024)  # several chunks, over one NATS message
    eventlog = await EventLog.connect(server.url, name="test", identity=server_operator(server))
    try:
        images = await eventlog.images()
        name = await images.put(data)
        assert name == digest(data)
        held = await stored_messages(eventlog)
        # A retried request puts the same bytes: found by name, nothing is written.
        assert await images.put(data) == name
        assert await stored_messages(eventlog) == held

        victim = nats_keeper.pid
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        await asyncio.wait_for(nats_keeper.wait_for_restarts(1), DEADLINE)

        # A reader with nothing cached (another process) gets the bytes from the store.
        fresh = Images(await eventlog.js.object_store(IMAGES_BUCKET))
        assert await fresh.get(name) == data
        with pytest.raises(ImageMissing):
            await fresh.get(digest(b"never stored"))

        # The executor's request to the provider carries the bytes as a data URL.
        wire = [
            {
                "role": "user",
                "content": [
                    {
                        "type": STORED_IMAGE,
                        "sha256": name,
                        "media_type": "image/png",
                        "detail": None,
                    },
                    {"type": "text", "text": "what is this?"},
                ],
            }
        ]
        (inlined,) = await inline_images(fresh, wire)
        url = f"data:image/png;base64,{base64.b64encode(data).decode()}"
        assert inlined["content"] == [
            {"type": "image_url", "image_url": {"url": url, "detail": "auto"}},
            {"type": "text", "text": "what is this?"},
        ]
    finally:
        await eventlog.close()

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.servers import Servers, real_servers


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    base: Path = tmp_path_factory.mktemp("servers")
    with real_servers(base) as s:
        yield s


def _with_database(url: str, name: str) -> str:
    # Both the embedded socket DSN (postgresql://user@/db?host=...) and a TCP
    # DSN carry the database as the path.
    head, sep, query = url.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{name}{sep}{query}"


@pytest.fixture
async def database_url(servers: Servers) -> AsyncIterator[str]:
    """A fresh, empty database for one test: projections never see another test's rows."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(servers.database_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    yield _with_database(servers.database_url, name)

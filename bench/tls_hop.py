"""What TLS costs one NATS hop: a request and its reply between two processes, plain and TLS.

The system's cost of TLS (bench.security_cost) is paid hop by hop: a 1-step run's path has
~27 TLS records one after the other (bench/README.md). This measures one request/reply
through nats-server with nothing else around it: two nats-servers (one plain, one with the
TLS the services use: TLS first, mutual, a certificate made for the run), a responder process
on each and this process asking, on uvloop as the services are. The request is 600 bytes
and the reply 300, about an event and an acknowledgement (nats-server sends a delivery
over 512 bytes as two TLS records). Rounds alternate plain and TLS; each prints the round
trip's median and p99 and the CPU each process spent per request, so what one hop's TLS
costs, and where, can be judged in a minute rather than by the whole system's noisier runs.

    python -m bench.tls_hop [--requests 5000] [--rounds 4] [--request-bytes 600] [--reply-bytes 300]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import multiprocessing.synchronize
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

import nats  # noqa: E402
from nats.aio.msg import Msg  # noqa: E402

from bench.agent_loop import cpu_seconds  # noqa: E402
from bench.hop_rounds import HopSide, compare  # noqa: E402
from o_devtools.certs import make_certificates  # noqa: E402
from o_devtools.embedded import EmbeddedNats  # noqa: E402
from o_devtools.embedded_tls import TlsNats, client_tls  # noqa: E402
from o_runtime.env import Env  # noqa: E402
from o_runtime.event_loop import loop_factory, run  # noqa: E402

SUBJECT = "bench.hop"
# Bytes of a request and of its reply, unless told otherwise (--request-bytes, --reply-bytes).
REQUEST_BYTES = 600
REPLY_BYTES = 300
WARMUP = 200


def _heap_as_in_a_service() -> None:
    """uvloop reads TLS with a 256 KiB buffer (`SSLObject.read`). In a fresh process glibc
    maps and unmaps it at every read (mmap, mremap, munmap: above its first mmap threshold);
    in the services, whose heaps have freed larger blocks, it comes from the heap (strace of
    the executor and gateway: no mmap in 200 runs). Freeing one large block raises glibc's
    threshold the same way, so the processes here pay what a service pays."""
    block = bytearray(1024 * 1024)
    del block


def _connect_options(certs_folder: str | None) -> dict[str, Any]:
    if certs_folder is None:
        return {}
    from o_devtools.certs import Certificates, KeyPair

    folder = Path(certs_folder)
    certs = Certificates(
        folder=folder,
        ca=folder / "ca.crt",
        server=KeyPair(folder / "server.crt", folder / "server.key"),
        client=KeyPair(folder / "client.crt", folder / "client.key"),
    )
    return client_tls(certs).options()


def respond(
    url: str, certs_folder: str | None, reply_bytes: int, ready: multiprocessing.synchronize.Event
) -> None:
    """The responder (a child process): answers every request on SUBJECT."""

    _heap_as_in_a_service()
    reply = b"r" * reply_bytes

    async def main() -> None:
        nc = await nats.connect(url, **_connect_options(certs_folder))

        async def answer(msg: Msg) -> None:
            await msg.respond(reply)

        await nc.subscribe(SUBJECT, cb=answer)
        await nc.flush()
        ready.set()
        await asyncio.Event().wait()

    run(main(), loop_factory(Env({})))


@dataclass
class Side(HopSide):
    url: str = ""
    server_pid: int = 0
    certs_folder: str | None = None
    responder: multiprocessing.process.BaseProcess | None = None


async def one_round(side: Side, requests: int, request: bytes) -> None:
    nc = await nats.connect(side.url, **_connect_options(side.certs_folder))
    try:
        for _ in range(WARMUP):
            await nc.request(SUBJECT, request, timeout=5)
        assert side.responder is not None and side.responder.pid is not None
        pids = {"responder": side.responder.pid, "nats-server": side.server_pid}
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        mine = time.process_time()
        took = []
        for _ in range(requests):
            start = time.perf_counter()
            await nc.request(SUBJECT, request, timeout=5)
            took.append((time.perf_counter() - start) * 1e6)
        cpu = {"requester": time.process_time() - mine} | {
            name: cpu_seconds(pid) - before[name] for name, pid in pids.items()
        }
    finally:
        await nc.close()
    side.record(took, cpu, requests)


def main(requests: int, rounds: int, request_bytes: int, reply_bytes: int) -> None:
    _heap_as_in_a_service()
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="o-tls-hop-") as tmp:
        base = Path(tmp)
        certs = make_certificates(base / "certs")
        servers = [
            EmbeddedNats(base / "plain", auth=False),
            TlsNats(base / "tls", certs, auth=False),
        ]
        sides: list[Side] = []
        try:
            for server, folder in zip(servers, (None, str(certs.folder)), strict=True):
                server.start()
                assert server.pid is not None
                sides.append(
                    Side(
                        server.__class__.__name__,
                        url=server.url,
                        server_pid=server.pid,
                        certs_folder=folder,
                    )
                )
            sides[0].name, sides[1].name = "plain", "TLS"
            for side in sides:
                ready = context.Event()
                side.responder = context.Process(
                    target=respond,
                    args=(side.url, side.certs_folder, reply_bytes, ready),
                    daemon=True,
                )
                side.responder.start()
                if not ready.wait(30):
                    raise RuntimeError(f"the {side.name} responder did not start")
            request = b"q" * request_bytes
            compare(
                sides,
                rounds,
                lambda side: one_round(side, requests, request),
                f"{requests} requests of {len(request)} bytes",
                "request",
            )
        finally:
            for side in sides:
                if side.responder is not None:
                    side.responder.terminate()
            for server in servers:
                server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000, help="timed requests a round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each (alternated)")
    # (A delivery whose protocol line and payload pass nats-server's first 512-byte buffer is
    # two TLS records: bench/README.md, 2026-11-29. 150 and 100 bytes stay within it.)
    parser.add_argument("--request-bytes", type=int, default=REQUEST_BYTES)
    parser.add_argument("--reply-bytes", type=int, default=REPLY_BYTES)
    args = parser.parse_args()
    main(args.requests, args.rounds, args.request_bytes, args.reply_bytes)

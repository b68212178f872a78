"""What one 1-step run asks of NATS and Postgres, counted (where round trips go).

Starts the bench's system (bench.agent_loop's services, plain NATS without authorization so
its monitoring port counts every connection alike, and a Postgres of the machine's own:
`--postgres-bin`, as bench.security_cost), makes `--warmup` runs, then counts over `--runs`
1-step runs:

- NATS: each connection's messages in and out (nats-server's /connz), by the name the
  connection gave (service and purpose), per run, with their mean size; and what was
  published, by subject, with its mean size (headers and payload; with the protocol line,
  over 512 bytes makes a delivery two TLS records: bench/README.md);
- Postgres: the statements the server ran (its statement log), by statement with numbers
  normalised, per run, and transactions committed per run (pg_stat_database).

    python -m bench.run_inventory --postgres-bin /usr/lib/postgresql/15/bin [--runs 50]

Counts, not times: what a change to the loop's round trips did is seen here first, then timed
with bench.security_cost or bench.agent_loop.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import re
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

import asyncpg  # noqa: E402
import nats  # noqa: E402
from nats.aio.msg import Msg  # noqa: E402

from bench.agent_loop import SERVICES, scripted  # noqa: E402
from bench.local_system import free_port, local_system, postgres_bin_argument  # noqa: E402
from bench.side_by_side import make_side  # noqa: E402
from bench.zero_latency_llm import ZeroLatencyLLM  # noqa: E402
from o_devtools.embedded import EmbeddedNats  # noqa: E402

MONITOR_PORT = free_port()


def _with_monitoring(self: EmbeddedNats) -> str:
    return f"http: 127.0.0.1:{MONITOR_PORT}\n"


def connections() -> dict[str, tuple[int, int, int, int]]:
    """(messages in, messages out, bytes in, bytes out) by connection name, summed over
    connections of one name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{MONITOR_PORT}/connz?limit=1000") as r:
        connz = json.load(r)
    out: dict[str, tuple[int, int, int, int]] = collections.defaultdict(lambda: (0, 0, 0, 0))
    for c in connz["connections"]:
        name = c.get("name") or f"cid {c['cid']}"
        i, o, ib, ob = out[name]
        out[name] = (i + c["in_msgs"], o + c["out_msgs"], ib + c["in_bytes"], ob + c["out_bytes"])
    return dict(out)


_IDS = re.compile(r"(?<=[.])[A-Za-z_]*[-0-9a-f]{8,}[^.]*|(?<=[.])\\d+(?=[.]|$)")


def _subject_kind(subject: str) -> str:
    if subject.startswith("_INBOX.") or subject.startswith("$JS.ACK."):
        return subject.split(".")[0] + "." + subject.split(".")[1] + ".*"
    return _IDS.sub("*", subject)


_NUMBERS = re.compile(r"\b\d+\b|'[^']*'")


def statements(log: Path, start: int) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    with log.open("rb") as f:
        f.seek(start)
        for line in f.read().decode(errors="replace").splitlines():
            m = re.search(r"(?:statement|execute [^:]*): (.*)$", line)
            if m and "duration:" in line:
                counts[_NUMBERS.sub("N", m.group(1))[:150]] += 1
    return counts


def _header_bytes(headers: dict[str, str] | None) -> int:
    """The size of a message's header block on the wire (NATS/1.0, one line a header)."""
    if not headers:
        return 0
    return len("NATS/1.0\r\n\r\n") + sum(len(k) + len(v) + 4 for k, v in headers.items())


async def main(runs: int, warmup: int, postgres_bin: Path) -> None:
    EmbeddedNats.extra_config = _with_monitoring  # type: ignore[method-assign]
    async with contextlib.AsyncExitStack() as stack:
        llm = stack.enter_context(ZeroLatencyLLM(scripted))
        system = await stack.enter_async_context(
            local_system(llm.base_url, SERVICES, nats_auth=False, postgres_bin=postgres_bin)
        )
        side = await make_side("plain", system)
        for i in range(warmup):
            await side.one_run("plain", i)
        pg = system.servers.postgres
        admin = await asyncpg.connect(pg.url)
        await admin.execute("ALTER SYSTEM SET log_min_duration_statement = 0")
        await admin.execute("SELECT pg_reload_conf()")
        log = pg.logfile
        xacts = (
            "SELECT xact_commit, sessions FROM pg_stat_database WHERE datname = current_database()"
        )
        await asyncio.sleep(0.5)  # the reload reaching every backend; counts only
        log_start = log.stat().st_size
        heard: collections.Counter[str] = collections.Counter()
        sizes: collections.Counter[str] = collections.Counter()

        async def count(msg: Msg) -> None:
            kind = _subject_kind(msg.subject)
            heard[kind] += 1
            # What a delivery carries besides the protocol line: headers and payload.
            sizes[kind] += len(msg.data) + _header_bytes(msg.headers)

        nc = await nats.connect(system.servers.nats.url, name="inventory")
        await nc.subscribe(">", cb=count)
        await nc.flush()
        before, commits = connections(), await admin.fetchrow(xacts)
        for i in range(runs):
            await side.one_run("plain", warmup + i)
        # The runs' last projection writes and acks land after the replies.
        await asyncio.sleep(2.0)
        after, commits_after = connections(), await admin.fetchrow(xacts)
        await nc.close()
        await admin.execute("ALTER SYSTEM RESET log_min_duration_statement")
        await admin.execute("SELECT pg_reload_conf()")
        await admin.close()
        print(f"NATS messages per run over {runs} 1-step runs (in = published by it, out = to it)")
        total_in = total_out = 0.0
        for name in sorted(after):
            i0, o0, ib0, ob0 = before.get(name, (0, 0, 0, 0))
            i1, o1, ib1, ob1 = after[name]
            di, do = (i1 - i0) / runs, (o1 - o0) / runs
            total_in += di
            total_out += do
            if di or do:
                # Bytes a message (headers and payload, as nats-server counts them).
                bi = (ib1 - ib0) / (i1 - i0) if i1 > i0 else 0
                bo = (ob1 - ob0) / (o1 - o0) if o1 > o0 else 0
                print(f"  {name:52s} in {di:6.2f} ({bi:5.0f} B)  out {do:6.2f} ({bo:5.0f} B)")
        print(f"  {'total':52s} in {total_in:6.2f}          out {total_out:6.2f}")
        print("NATS messages published per run, by subject (ids and numbers as *)")
        for kind, n in heard.most_common():
            print(f"  {n / runs:6.2f}  {sizes[kind] / n:6.0f} B  {kind}")
        counts = statements(log, log_start)
        print(
            f"Postgres: {sum(counts.values()) / runs:.1f} statements and"
            f" {(commits_after[0] - commits[0]) / runs:.1f} commits per run;"
            f" {commits_after[1] - commits[1]} sessions begun in {runs} runs"
        )
        for text, n in counts.most_common(40):
            print(f"  {n / runs:5.2f}  {text}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=30)
    postgres_bin_argument(parser)
    args = parser.parse_args()
    if args.postgres_bin is None:
        parser.error("--postgres-bin (or O_POSTGRES_BIN_DIR) is needed: its statement log")
    asyncio.run(main(args.runs, args.warmup, args.postgres_bin))

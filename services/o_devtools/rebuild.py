"""`python -m o_devtools.rebuild [NAME ...]` (or `make rebuild`): drop projections and
replay them from the log, while the services keep running.

Each rebuild is one transaction: readers see the old rows until it commits,
and the live projector resumes after it, skipping what the rebuild applied.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys

from o_contracts import projection_names as names
from o_devtools.embedded import data_dir
from o_devtools.endpoints import tool_endpoints
from o_runtime.db import connect_pool
from o_runtime.eventlog import EventLog
from o_runtime.nats_identity import Identity
from o_runtime.nats_tls import TlsMisconfigured
from o_runtime.projector import Projection, Projector, Rebuilt

# Every projection, by the service that owns it ("module:attribute").
PROJECTIONS = {
    names.AGENTS: "o_gateway.projections:agents",
    names.MEMORY: "o_memory.projections:memory",
    names.ARCHIVAL: "o_memory.archival_projection:archival",
    names.RUNS: "o_executor.projections:runs",
    names.TOOLS: "o_gateway.tools_projection:tools",
    names.MCP_SERVERS: "o_gateway.mcp_projection:mcp_servers",
    names.GROUPS: "o_gateway.groups_projection:groups",
    names.PROVIDERS: "o_gateway.providers_projection:providers",
    names.IDENTITIES: "o_gateway.identities_projection:identities",
    names.SANDBOX_CONFIGS: "o_gateway.sandbox_configs_projection:sandbox_configs",
    names.EVOLUTION: "o_evolution.projection:evolution",
    names.FOLDERS: "o_memory.files.projection:folders",
    names.CALLBACKS: "o_gateway.callbacks.projection:callbacks",
    names.SCHEDULES: "o_schedules.projection:schedules",
}


def load(name: str) -> Projection:
    module, _, attr = PROJECTIONS[name].partition(":")
    projection: Projection = getattr(importlib.import_module(module), attr)
    return projection


async def rebuild(
    names: list[str], nats_url: str, database_url: str, identity: Identity | None = None
) -> dict[str, Rebuilt]:
    eventlog = await EventLog.connect(nats_url, name="rebuild", identity=identity)
    pool = await connect_pool(database_url, max_size=2)
    try:
        return {n: await Projector(load(n), pool, eventlog).rebuild() for n in names}
    finally:
        await pool.close()
        await eventlog.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", help=f"projections (default: all of {list(PROJECTIONS)})"
    )
    args = parser.parse_args(argv)
    names = args.names or list(PROJECTIONS)
    unknown = [n for n in names if n not in PROJECTIONS]
    if unknown:
        parser.error(f"unknown projection(s): {', '.join(unknown)}")
    # Explicit settings win; otherwise the system `make run` started in the data folder.
    endpoints = tool_endpoints(data_dir(), os.environ)
    nats_url, database_url = endpoints.get("NATS_URL"), endpoints.get("DATABASE_URL")
    if not nats_url or not database_url:
        print(
            "NATS_URL and DATABASE_URL must point at the running system "
            "(or start the system with `make run`, which records them in the data folder)",
            file=sys.stderr,
        )
        return 2
    # An operator's identity: O_NATS_NKEY, or the one `make run` keeps in the data folder
    # (and NATS' TLS the same way).
    try:
        identity = Identity.of("operator", endpoints)
    except TlsMisconfigured as exc:
        print(exc, file=sys.stderr)
        return 2
    for name, done in asyncio.run(rebuild(names, nats_url, database_url, identity)).items():
        line = f"{name}: replayed {done.replayed} events"
        if done.skipped:
            # Dead-lettered when they were live (o.dlq.projection-<name>).
            shown = ", ".join(str(s) for s in done.skipped[:10])
            line += f"; skipped {len(done.skipped)} it cannot apply (seq {shown})"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The setup role and O's NATS identities.

- `roles.py`: what each identity may publish and subscribe to (from o_contracts/subjects.py);
- `topology.py`: the streams, buckets and durable consumers only the setup role makes;
- `credentials.py`: a folder of NKEY seeds (one per role, outside publishers');
- `server_config.py`: nats-server's `authorization` block for those keys;
- `python -m o_setup`: apply the topology, make keys, render the server's configuration,
  add publishers, rotate keys (docs/security.md).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping

from o_runtime.env import Env
from o_runtime.nats_identity import Identity
from o_runtime.one_shot_nats import connect_once


async def apply_topology(
    url: str, identity: Identity, environ: Mapping[str, str], replicas: int = 1
) -> None:
    """Connect as `identity` (the setup role) and apply O's topology."""
    from o_setup.topology import apply

    # (A one-shot connection: a server stopped while `make run` was still starting fails
    # this within seconds; the supervisor waits for this thread.)
    nc = await connect_once(url, "o-setup", identity)
    try:
        await apply(nc.jetstream(), Env(environ), replicas)
    finally:
        await nc.close()


def apply_topology_blocking(
    url: str, identity: Identity, environ: Mapping[str, str], replicas: int = 1
) -> None:
    """`apply_topology` from synchronous code, whether or not an event loop runs here."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(apply_topology(url, identity, environ, replicas))
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="o-setup")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]

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

import nats

from o_runtime.env import Env
from o_runtime.nats_identity import Identity


async def apply_topology(
    url: str, identity: Identity, environ: Mapping[str, str], replicas: int = 1
) -> None:
    """Connect as `identity` (the setup role) and apply O's topology."""
    from o_setup.topology import apply

    # A one-shot: a short reconnect rides out a server's blip, but a server gone for good
    # (stopped while `make run` was still starting: the supervisor then waits for this
    # thread) fails it within seconds instead of after nats-py's 60 tries two seconds apart.
    nc = await nats.connect(
        url,
        name="o-setup",
        connect_timeout=5,
        max_reconnect_attempts=3,
        reconnect_time_wait=1,
        **identity.options(),
    )
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

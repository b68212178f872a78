"""`python -m o_setup COMMAND`: O's NATS topology and identities (docs/security.md).

  apply                      create or update streams, buckets, durable consumers
                             (NATS_URL; O_NATS_NKEY: the setup role's seed file)
  keys [--dir D]             make a seed per role in D (default: the data folder's)
  config [--dir D]           print nats-server's authorization block for D's keys
  publisher NAME [--agent A ...] [--dir D]
                             an outside publisher's identity (restricted to agents A)
  remove-publisher NAME [--dir D]
                             stop accepting an outside publisher
  rotate ROLE [--dir D]      a new key for ROLE; the old one is accepted until `retire`
  retire ROLE [--dir D]      stop accepting ROLE's previous key

With the data folder's keys (`make run`), the running embedded nats-server is told at
once (a configuration reload); elsewhere put `config`'s output where your servers read it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from o_runtime.env import Env
from o_runtime.nats_identity import Identity
from o_setup import apply_topology
from o_setup.credentials import FOLDER, Credentials
from o_setup.server_config import authorization


def _data_dir() -> Path:
    return Path(os.environ.get("O_DATA_DIR") or "data").resolve()


def _credentials(folder: str | None) -> tuple[Credentials, Path | None]:
    """The folder's credentials, and the data folder when it is the data folder's."""
    if folder:
        return Credentials(Path(folder)), None
    base = _data_dir()
    return Credentials(base / FOLDER), base


def _reloaded(base: Path | None) -> None:
    if base is None:
        print("apply it: put `python -m o_setup config` where nats-server reads it, reload")
        return
    from o_devtools.embedded import reload_embedded_nats

    if reload_embedded_nats(base):
        print("the running nats-server was reloaded")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m o_setup", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("apply")
    for name in ("keys", "config"):
        sub.add_parser(name).add_argument("--dir")
    pub = sub.add_parser("publisher")
    pub.add_argument("name")
    pub.add_argument("--agent", action="append", dest="agents")
    pub.add_argument("--dir")
    gone = sub.add_parser("remove-publisher")
    gone.add_argument("name")
    gone.add_argument("--dir")
    for name in ("rotate", "retire"):
        p = sub.add_parser(name)
        p.add_argument("role")
        p.add_argument("--dir")
    args = parser.parse_args(argv)

    if args.command == "apply":
        env = Env()
        url = env.optional("NATS_URL")
        if not url:
            parser.error("NATS_URL must be set")
        identity = Identity.of("setup", env.environ)
        replicas = env.integer("O_STREAM_REPLICAS", 1, minimum=1)
        asyncio.run(apply_topology(url, identity, env.environ, replicas))
        print("streams, buckets and durable consumers are up to date")
        return 0
    creds, base = _credentials(args.dir)
    if args.command == "keys":
        creds.ensure()
        print(f"seeds in {creds.folder}: one <role>.nk per role (keep them secret)")
    elif args.command == "config":
        sys.stdout.write(authorization(creds.users()))
    elif args.command == "publisher":
        seed = creds.add_publisher(args.name, args.agents)
        print(
            f"{args.name}: seed in {seed} (hand it over securely; inbox prefix _INBOX.{args.name})"
        )
        _reloaded(base)
    elif args.command == "remove-publisher":
        creds.remove_publisher(args.name)
        print(f"{args.name}: no longer accepted")
        _reloaded(base)
    elif args.command == "rotate":
        seed = creds.rotate(args.role)
        print(f"{args.role}: new seed in {seed}; restart its processes, then `retire {args.role}`")
        _reloaded(base)
    elif args.command == "retire":
        creds.retire(args.role)
        print(f"{args.role}: its previous key is no longer accepted")
        _reloaded(base)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m o_ops COMMAND`: operating a running O (docs/operations.md).

  status [--json]                       services, consumers, lags, dead letters
  dead-letters list | show ID | redrive ID
  projections rebuild [NAME ...] | verify [NAME ...]
  agents export ID [-o FILE] | import FILE
  backup PATH | restore PATH

Where it connects: NATS_URL, DATABASE_URL and O_NATS_NKEY (the operator's seed), else the
running `make run` found in O_DATA_DIR; the HTTP API at O_URL with O_API_KEY.
Exit status: 0 fine, 1 a problem found (or refused), 2 a setting or argument missing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import asyncpg
import nats.errors
from nats.js.errors import NotFoundError

from o_ops import agent_files, backup, dead_letters, projections, status
from o_ops.projections import UnknownProjection
from o_ops.settings import NotConfigured, OpsSettings
from o_runtime.nats_identity import IdentityMissing
from o_runtime.one_shot_nats import NatsUnreachable


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m o_ops",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = top.add_subparsers(dest="command", required=True)
    for module in (status, dead_letters, projections, agent_files, backup):
        module.add_parser(commands)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    settings = OpsSettings.from_env(os.environ)
    try:
        code: int = asyncio.run(args.run(args, settings))
    except (NotConfigured, IdentityMissing, UnknownProjection) as exc:
        print(f"o_ops: {exc}", file=sys.stderr)
        return 2
    except NotFoundError as exc:
        print(f"o_ops: not on the server: {exc} (is O's topology applied?)", file=sys.stderr)
        return 1
    except (nats.errors.Error, OSError, asyncpg.PostgresError) as exc:
        print(f"o_ops: {unreachable(settings, exc)}", file=sys.stderr)
        return 1
    return code


def unreachable(settings: OpsSettings, exc: BaseException) -> str:
    if isinstance(exc, NatsUnreachable):
        return f"NATS at {exc}"
    if isinstance(exc, nats.errors.Error):
        return f"NATS at {settings.nats_url}: {exc!r}"
    return f"{exc!r} (NATS {settings.nats_url}, Postgres {settings.database_url})"


if __name__ == "__main__":
    sys.exit(main())

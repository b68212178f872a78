"""`python -m o_ops backup PATH` and `python -m o_ops restore PATH`.

Backup: every stream of O's NATS (the log, commands, dead letters, the run queue's bucket,
the object stores) as a JetStream snapshot (jetstream_snapshots.py), in the order
backup_plan.py explains, into folder PATH (mode 0700, files 0600), `manifest.json` last.
Snapshots rather than reading every message and publishing it again: a snapshot is the
server's own store, so the copy keeps each message's sequence, time and headers, deleted
ranges, and every durable consumer's position; messages published again would get new
sequences and times (and the projections' checkpoints, the run queue's cursors and every
`seq` in the API name sequences), and the consumers would start over.

Restore: into an empty NATS (streams the setup role made empty are replaced; a stream
holding anything stops the restore before it changes a thing), each file checked against
its SHA-256 first; then every projection is rebuilt from the restored log into
DATABASE_URL (migrations first: an empty database is fine). Start the services after it.

Backups are not encrypted here: docs/operations.md says how to keep them.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from nats.js.api import StorageType

from o_devtools.rebuild import PROJECTIONS, rebuild
from o_ops.backup_plan import (
    MANIFEST,
    CannotRestore,
    Manifest,
    StreamCopy,
    backup_order,
    restore_plan,
    snapshot_file,
)
from o_ops.connections import operator_log
from o_ops.jetstream_snapshots import CHUNK, SnapshotFailed, restore, snapshot
from o_ops.settings import OpsSettings
from o_ops.tables import table
from o_runtime.roll_call import version


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    made = commands.add_parser("backup", help="snapshot every stream into a new folder")
    made.add_argument("path", type=Path)
    made.set_defaults(run=run_backup)
    back = commands.add_parser(
        "restore", help="restore a backup into an empty NATS, then rebuild every projection"
    )
    back.add_argument("path", type=Path)
    back.add_argument(
        "--no-rebuild", action="store_true", help="restore the streams only (rebuild later)"
    )
    back.set_defaults(run=run_restore)


def _private_file(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)


class SnapshotFile:
    """A snapshot's file (0600, never an existing one), its size and SHA-256 as written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.digest = hashlib.sha256()
        self.size = 0

    def __enter__(self) -> SnapshotFile:
        self._fd = _private_file(self.path)
        return self

    def write(self, chunk: bytes) -> None:
        self.digest.update(chunk)
        self.size += len(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(self._fd, view) :]

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                os.fsync(self._fd)
        finally:
            os.close(self._fd)


def _new_folder(path: Path) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(f"{path} exists and is not an empty folder")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)


async def run_backup(args: argparse.Namespace, settings: OpsSettings) -> int:
    try:
        _new_folder(args.path)
    except OSError as exc:
        print(f"backup: {exc}", file=sys.stderr)
        return 2
    copies: list[StreamCopy] = []
    async with operator_log(settings) as eventlog:
        infos = await eventlog.js.streams_info()
        names = []
        for info in infos:
            if info.config.storage == StorageType.MEMORY:
                print(
                    f"skipped {info.config.name}: a memory stream has no snapshot", file=sys.stderr
                )
            else:
                names.append(info.config.name)
        for name in backup_order([n for n in names if n]):
            with SnapshotFile(args.path / snapshot_file(name)) as out:
                meta = await snapshot(eventlog.nc, name, out.write)
            state = meta["state"]
            copies.append(
                StreamCopy(
                    name=name,
                    file=out.path.name,
                    size=out.size,
                    sha256=out.digest.hexdigest(),
                    messages=int(state.get("messages", 0)),
                    first_seq=int(state.get("first_seq", 0)),
                    last_seq=int(state.get("last_seq", 0)),
                    meta=meta,
                )
            )
    manifest = Manifest(made_at=datetime.now(UTC).isoformat(), o_version=version(), streams=copies)
    fd = _private_file(args.path / MANIFEST)
    try:
        os.write(fd, manifest.dumps().encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    print(
        table(
            ["stream", "messages", "sequences", "bytes"],
            [[c.name, c.messages, f"{c.first_seq}-{c.last_seq}", c.size] for c in copies],
        )
    )
    print(f"backup written to {args.path} (not encrypted: see docs/operations.md)")
    return 0


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def checked(folder: Path) -> Manifest:
    """The backup's manifest, every file there with its size and SHA-256 (CannotRestore)."""
    try:
        manifest = Manifest.loads((folder / MANIFEST).read_text())
    except OSError as exc:
        raise CannotRestore(f"no {MANIFEST} in {folder}: not a finished backup ({exc})") from None
    for copy in manifest.streams:
        digest = hashlib.sha256()
        size = 0
        try:
            for chunk in _chunks(folder / copy.file):
                digest.update(chunk)
                size += len(chunk)
        except OSError as exc:
            raise CannotRestore(f"{copy.file}: {exc}") from None
        if size != copy.size or digest.hexdigest() != copy.sha256:
            raise CannotRestore(f"{copy.file} is not the file the backup wrote (size or SHA-256)")
    return manifest


async def run_restore(args: argparse.Namespace, settings: OpsSettings) -> int:
    try:
        manifest = checked(args.path)
    except CannotRestore as exc:
        print(f"restore: {exc}", file=sys.stderr)
        return 1
    if not args.no_rebuild:
        settings.database()  # (before anything changes: a rebuild needs it)
    async with operator_log(settings) as eventlog:
        existing = {
            info.config.name: int(info.state.messages or 0)
            for info in await eventlog.js.streams_info()
            if info.config.name
        }
        try:
            plan = restore_plan(manifest, existing)
        except CannotRestore as exc:
            print(f"restore: {exc}", file=sys.stderr)
            return 1
        rows = []
        for copy, (name, replace) in zip(manifest.streams, plan, strict=True):
            if replace:
                await eventlog.js.delete_stream(name)
            try:
                state = await restore(eventlog.nc, name, copy.meta, _chunks(args.path / copy.file))
            except SnapshotFailed as exc:
                print(f"restore: {exc}", file=sys.stderr)
                return 1
            rows.append([name, state.get("messages", 0), copy.messages])
    print(table(["stream", "messages restored", "in the backup"], rows))
    if args.no_rebuild:
        print("projections not rebuilt: python -m o_ops projections rebuild")
    else:
        url, identity = settings.nats()
        for name, done in (
            await rebuild(list(PROJECTIONS), url, settings.database(), identity)
        ).items():
            print(f"{name}: replayed {done.replayed} events")
    print(
        "restored. If this release declares more than the backup holds, apply the topology"
        " (python -m o_setup apply, the setup Job) before starting the services."
    )
    return 0

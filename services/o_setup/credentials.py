"""A folder of NATS identities: one NKEY seed per role, and outside publishers'.

`make run` keeps it under the data folder (`<data>/nats-auth`, mode 0700, each seed
0600): made at the first start, kept after. The server's configuration is rendered from
the public keys only (server_config.py). Layout:

    <role>.nk                  the role's seed
    <role>.previous.nk         the seed it had before `rotate`, still accepted until `retire`
    publishers/<name>.nk       an outside publisher's seed
    publishers/<name>.json     {"agents": [...]} when it is restricted to those agents

A seed file is written once (O_EXCL), never rewritten in place: two processes racing on a
fresh folder agree on the first one's key.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from o_runtime import nkey
from o_runtime.nats_identity import ROLE_NAME
from o_setup.roles import ROLES, Role, publisher

FOLDER = "nats-auth"


@dataclass(frozen=True)
class User:
    """One key the server accepts, with the role it acts as."""

    role: Role
    public_key: str


def _write_new(path: Path, text: str) -> bool:
    """Write `text` to a new file readable by its owner only; False if it exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")
    return True


class Credentials:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder).resolve()

    @classmethod
    def in_data_dir(cls, base: Path) -> Credentials:
        return cls(Path(base) / FOLDER)

    def _ensure_folder(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)

    def seed_file(self, role: str) -> Path:
        """The role's seed file, made on first use."""
        if role not in ROLES:
            raise KeyError(f"no role {role!r} (o_setup/roles.py)")
        self._ensure_folder(self.folder)
        path = self.folder / f"{role}.nk"
        _write_new(path, nkey.new_user_seed())
        return path

    def ensure(self) -> None:
        for role in ROLES:
            self.seed_file(role)

    def rotate(self, role: str) -> Path:
        """A new key for `role`; the old one stays accepted (as `previous`) until `retire`."""
        current = self.seed_file(role)
        previous = self.folder / f"{role}.previous.nk"
        if previous.exists():
            raise FileExistsError(f"{role} was rotated already: retire its previous key first")
        current.rename(previous)
        return self.seed_file(role)

    def retire(self, role: str) -> None:
        (self.folder / f"{role}.previous.nk").unlink(missing_ok=True)

    def add_publisher(self, name: str, agents: Iterable[str] | None = None) -> Path:
        """An outside publisher's identity (optionally restricted to `agents`); its seed file."""
        if not ROLE_NAME.fullmatch(name) or name in ROLES:
            raise ValueError(f"a publisher needs a name of its own (a-z, 0-9, _, -): {name!r}")
        folder = self.folder / "publishers"
        self._ensure_folder(folder)
        seed = folder / f"{name}.nk"
        if not _write_new(seed, nkey.new_user_seed()):
            raise FileExistsError(f"publisher {name} exists ({seed})")
        if agents is not None:
            (folder / f"{name}.json").write_text(json.dumps({"agents": sorted(agents)}))
        return seed

    def remove_publisher(self, name: str) -> None:
        for suffix in (".nk", ".json"):
            (self.folder / "publishers" / f"{name}{suffix}").unlink(missing_ok=True)

    def users(self) -> list[User]:
        """Every key the server should accept: each role's (and its previous), publishers'."""
        out: list[User] = []
        for role in ROLES.values():
            for name in (f"{role.name}.nk", f"{role.name}.previous.nk"):
                path = self.folder / name
                if path.exists():
                    out.append(User(role, nkey.public_key(path.read_text().strip())))
        folder = self.folder / "publishers"
        for seed in sorted(folder.glob("*.nk")) if folder.is_dir() else []:
            name = seed.name.removesuffix(".nk")
            limits = folder / f"{name}.json"
            agents = json.loads(limits.read_text())["agents"] if limits.exists() else None
            out.append(User(publisher(name, agents), nkey.public_key(seed.read_text().strip())))
        return out

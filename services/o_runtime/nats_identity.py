"""Who a process is on NATS: its NKEY seed file and its inbox prefix.

Every connection to O's NATS authenticates: no server O sets up accepts anonymous clients
(docs/security.md). A process is handed its identity as a file holding its NKEY seed,
named by `O_NATS_NKEY` (`make run` makes one per role under the data folder; Kubernetes
mounts it from a Secret). The seed is read once, at start: a process keeps the identity it
started with across reconnections, and takes a rotated key when it is restarted
(docs/security.md, rotation).

Replies come back on `_INBOX.<role>.>`: each role may subscribe only to its own inboxes,
so no identity reads another's replies.

An identity also carries how the process reaches the servers: over TLS when the environment
configures it (`O_NATS_TLS_*`, nats_tls.py), so every connection a process makes with its
identity (the event log's, FastStream's broker, the setup role's) is encrypted alike.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from o_runtime import nkey
from o_runtime.nats_tls import NatsTls

NKEY_ENV = "O_NATS_NKEY"
# Role names are NATS subject tokens (they make the inbox prefix).
ROLE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")

nkey.install()


class IdentityMissing(RuntimeError):
    pass


def inbox_prefix(role: str) -> str:
    return f"_INBOX.{role}"


@dataclass(frozen=True)
class Identity:
    """A role's NKEY seed file (None: connect without credentials, refused by O's servers)
    and the TLS it connects with (None: plain TCP)."""

    role: str
    seed: str | None = field(default=None, repr=False)
    tls: NatsTls | None = None

    def _credentials(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"inbox_prefix": inbox_prefix(self.role)}
        if self.seed is not None:
            opts["nkeys_seed_str"] = self.seed
        return opts

    def options(self) -> dict[str, Any]:
        """Keyword arguments for `nats.connect`."""
        return self._credentials() | (self.tls.options() if self.tls is not None else {})

    def broker_options(self) -> dict[str, Any]:
        """Keyword arguments for FastStream's `NatsBroker` (TLS goes in its `security=`)."""
        opts = self._credentials()
        if self.tls is not None:
            opts["security"] = self.tls.security()
        return opts

    def with_tls(self, tls: NatsTls | None) -> Identity:
        return Identity(self.role, self.seed, tls)

    @property
    def public_key(self) -> str | None:
        return nkey.public_key(self.seed) if self.seed is not None else None

    @classmethod
    def of(cls, role: str, environ: Mapping[str, str] | None = None) -> Identity:
        """The identity `O_NATS_NKEY` names, for `role` (whose inboxes it uses), with the
        TLS `O_NATS_TLS_*` configure (TlsMisconfigured if they name unusable files)."""
        if not ROLE_NAME.fullmatch(role):
            raise ValueError(f"not a role name: {role!r}")
        environ = os.environ if environ is None else environ
        tls = NatsTls.from_env(environ)
        path = environ.get(NKEY_ENV)
        if not path:
            return cls(role, tls=tls)
        return cls.from_file(role, Path(path)).with_tls(tls)

    @classmethod
    def from_file(cls, role: str, seed_file: Path) -> Identity:
        try:
            seed = Path(seed_file).read_text().strip()
            nkey.public_key(seed)
        except OSError as exc:
            raise IdentityMissing(f"NATS identity {seed_file}: cannot read it ({exc})") from None
        except nkey.InvalidSeed as exc:
            raise IdentityMissing(
                f"NATS identity {seed_file}: not an NKEY user seed ({exc})"
            ) from None
        return cls(role, seed)

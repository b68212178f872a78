"""The secrets a system `make run` keeps in its own data folder.

Tool secrets and MCP servers' tokens are encrypted under `O_SECRETS_KEY` before they enter
the log (o_runtime/tool_secrets.py). When the supervisor starts the log itself (embedded
NATS in the data folder) and no key is set, the key is made once and kept beside that log
(`secrets.key`, readable by its owner only): the ciphertext and the key that opens it live
and die together, and a local system needs no setup to accept secrets. A system on
external NATS must be given its key (the operator's to keep, rotate and back up).

The same goes for the secret completion callbacks are signed with (`O_CALLBACK_SECRET`,
docs/callbacks.md): made once beside the log (`callback.secret`), where a developer
reads it to check the signatures their receiver gets.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet

from o_gateway.callbacks.settings import SECRET_ENV as CALLBACK_SECRET_ENV
from o_runtime.tool_secrets import KEY_ENV

KEY_FILE = "secrets.key"
CALLBACK_SECRET_FILE = "callback.secret"


def data_folder_key(base: Path) -> str:
    return _kept(base / KEY_FILE, lambda: Fernet.generate_key().decode())


def data_folder_callback_secret(base: Path) -> str:
    return _kept(base / CALLBACK_SECRET_FILE, lambda: secrets.token_urlsafe(32))


def _kept(path: Path, make: Callable[[], str]) -> str:
    """The secret kept at `path`, made (readable by its owner only) if there is none."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    key = make()
    # O_EXCL: two supervisors racing on a fresh folder agree on the first one's key.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    return key


def with_key(env: dict[str, str], base: Path) -> dict[str, str]:
    """`env` with O_SECRETS_KEY and O_CALLBACK_SECRET from the data folder, each unless it
    is set, and neither if the log is elsewhere."""
    if env.get("NATS_URL"):
        return env
    out = dict(env)
    if not env.get(KEY_ENV):
        out[KEY_ENV] = data_folder_key(base)
    if not env.get(CALLBACK_SECRET_ENV):
        out[CALLBACK_SECRET_ENV] = data_folder_callback_secret(base)
    return out

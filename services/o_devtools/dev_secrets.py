"""The secrets key of a system `make run` keeps in its own data folder.

Tool secrets and MCP servers' tokens are encrypted under `O_SECRETS_KEY` before they enter
the log (o_runtime/tool_secrets.py). When the supervisor starts the log itself (embedded
NATS in the data folder) and no key is set, the key is made once and kept beside that log
(`secrets.key`, readable by its owner only): the ciphertext and the key that opens it live
and die together, and a local system needs no setup to accept secrets. A system on
external NATS must be given its key (the operator's to keep, rotate and back up).
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.fernet import Fernet

from o_runtime.tool_secrets import KEY_ENV

KEY_FILE = "secrets.key"


def data_folder_key(base: Path) -> str:
    path = base / KEY_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    key = Fernet.generate_key().decode()
    # O_EXCL: two supervisors racing on a fresh folder agree on the first one's key.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    return key


def with_key(env: dict[str, str], base: Path) -> dict[str, str]:
    """`env` with O_SECRETS_KEY from the data folder, unless it is set or the log is
    elsewhere."""
    if env.get(KEY_ENV) or env.get("NATS_URL"):
        return env
    return {**env, KEY_ENV: data_folder_key(base)}

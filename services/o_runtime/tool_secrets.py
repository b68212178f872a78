"""Per-agent tool secrets: encrypted before they enter the log, decrypted only in the sandbox.

Every state change in O is an event in the log, and the log is kept forever,
replicated, and readable by every service and by `make rebuild`. A secret
written there in plaintext could never be taken back. So the gateway
encrypts each value with Fernet (AES-128-CBC + HMAC-SHA256) under
`O_SECRETS_KEY` before appending; events and the agents projection hold only
ciphertext; the executor forwards ciphertext in `RunTool`; and only the tool
sandbox, which also holds the key, decrypts — in memory, for the one run
that needs them. API responses show the keys with values redacted. Rotating
the key means re-setting the secrets (old ciphertext no longer decrypts and
the sandbox says so).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from cryptography.fernet import Fernet, InvalidToken

KEY_ENV = "O_SECRETS_KEY"
REDACTED = "****"


class SecretsUnavailable(Exception):
    """No key is configured, or a value was encrypted under another key."""


def check_key(environ: Mapping[str, str]) -> None:
    """Raises SecretsUnavailable if a key is set but is not a Fernet key (no key is
    fine: agents without secrets need none)."""
    if environ.get(KEY_ENV):
        _fernet(environ)


def _fernet(environ: Mapping[str, str] = os.environ) -> Fernet:
    key = environ.get(KEY_ENV)
    if not key:
        raise SecretsUnavailable(
            f"{KEY_ENV} is not set: tool secrets need an encryption key "
            "(generate one with `python -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())'`)"
        )
    try:
        return Fernet(key.encode())
    except ValueError as exc:
        raise SecretsUnavailable(f"{KEY_ENV} is not a valid Fernet key: {exc}") from exc


def encrypt_all(plain: dict[str, str]) -> dict[str, str]:
    if not plain:
        return {}
    f = _fernet()
    return {k: f.encrypt(v.encode()).decode() for k, v in plain.items()}


def decrypt_all(encrypted: dict[str, str]) -> dict[str, str]:
    if not encrypted:
        return {}
    f = _fernet()
    try:
        return {k: f.decrypt(v.encode()).decode() for k, v in encrypted.items()}
    except InvalidToken as exc:
        raise SecretsUnavailable(
            f"a tool secret does not decrypt with this {KEY_ENV} (was the key rotated?)"
        ) from exc

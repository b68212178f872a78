"""NKEY user identities (NATS' Ed25519 keys) on the `cryptography` package O already uses.

A NATS user proves who it is by signing the server's nonce with its seed; the server knows
only the public key (`U...`), so its configuration holds no secret. nats-py signs with the
`nkeys` package (PyNaCl); this module implements the few calls nats-py makes on it, and
`install()` offers them as `nkeys` when that package is not installed, so `nats.connect(...,
nkeys_seed=path)` and FastStream's broker work unchanged either way.

The encoding is NATS' own: base32 (RFC 4648, no padding) of a prefix byte, the key and a
CRC-16/XMODEM checksum (little-endian); a user seed starts `SU`, a user public key `U`.
"""

from __future__ import annotations

import base64
import binascii
import sys
import types

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

_PREFIX_SEED = 18 << 3  # 'S'
_PREFIX_USER = 20 << 3  # 'U'


class InvalidSeed(ValueError):
    pass


def _crc16(data: bytes) -> int:
    return binascii.crc_hqx(data, 0)  # CRC-16/XMODEM: polynomial 0x1021, initial 0


def _encode(raw: bytes) -> bytes:
    checked = raw + _crc16(raw).to_bytes(2, "little")
    return base64.b32encode(checked).rstrip(b"=")


def _decode(text: bytes) -> bytes:
    text = bytes(text).strip()
    try:
        checked = base64.b32decode(text + b"=" * (-len(text) % 8))
    except binascii.Error as exc:
        raise InvalidSeed("not base32") from exc
    raw, crc = checked[:-2], int.from_bytes(checked[-2:], "little")
    if len(checked) < 3 or _crc16(raw) != crc:
        raise InvalidSeed("checksum mismatch")
    return raw


def new_user_seed() -> str:
    """A fresh user seed (`SU...`): the secret of one identity."""
    private = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    head = bytes([_PREFIX_SEED | (_PREFIX_USER >> 5), (_PREFIX_USER & 31) << 3])
    return _encode(head + private).decode()


class KeyPair:
    """What nats-py uses of `nkeys.KeyPair`: `public_key`, `sign`, `wipe`."""

    def __init__(self, seed: bytes | bytearray | str) -> None:
        raw = _decode(seed.encode() if isinstance(seed, str) else bytes(seed))
        if len(raw) != 34:
            raise InvalidSeed("a seed holds 32 bytes")
        if raw[0] & 0xF8 != _PREFIX_SEED or ((raw[0] & 7) << 5 | raw[1] >> 3) != _PREFIX_USER:
            raise InvalidSeed("not a user seed (SU...)")
        self._key: Ed25519PrivateKey | None = Ed25519PrivateKey.from_private_bytes(raw[2:])
        public = self._key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.public_key: bytes = _encode(bytes([_PREFIX_USER]) + public)

    def sign(self, data: bytes) -> bytes:
        if self._key is None:
            raise InvalidSeed("wiped")
        return self._key.sign(data)

    def wipe(self) -> None:
        self._key = None


def public_key(seed: str) -> str:
    """The public key (`U...`) the server is told for `seed`."""
    return KeyPair(seed).public_key.decode()


def from_seed(seed: bytes | bytearray) -> KeyPair:
    return KeyPair(seed)


def install() -> None:
    """Offer this module as `nkeys` to nats-py when the `nkeys` package is absent."""
    if "nkeys" in sys.modules:
        return
    try:
        import nkeys  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        shim = types.ModuleType("nkeys")
        shim.__doc__ = __doc__
        shim.from_seed = from_seed  # type: ignore[attr-defined]
        shim.KeyPair = KeyPair  # type: ignore[attr-defined]
        sys.modules["nkeys"] = shim

"""How a process reaches NATS over TLS: the CA it trusts and, for mutual TLS, its certificate.

Off unless configured: `make run` and the tests' shared system stay on loopback in plain TCP.
On when `O_NATS_TLS_CA` (a PEM bundle of the CAs that sign the servers' certificates) or a
client certificate is set, or `NATS_URL` is `tls://...` (then the system's trust store is used
when no CA is named). `O_NATS_TLS_CERT` and `O_NATS_TLS_KEY` give the process a certificate of
its own, for servers that ask for one (`verify: true` in their `tls` block); who the process
is stays its NKEY (nats_identity.py): the certificate only gets it through the door.

**TLS before the first byte.** nats-py upgrades a `nats://` connection only when the server's
plaintext INFO says `tls_required`, so a man in the middle that strips that flag would get a
plaintext CONNECT (and the NKEY's signature of the nonce it relayed). With TLS configured, O's
clients therefore start with the TLS handshake (`tls_handshake_first`), which the servers
accept with `handshake_first` in their `tls` block (k8s/, tests/e2e/test_tls.py).
`O_NATS_TLS_FIRST=0` turns that off for a server that cannot do it (nats-server before
2.10.4): the downgrade above is then possible.

The context is built once, at start, so a missing or unreadable file stops the process with
the variable's name; reconnections reuse it.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from o_runtime import nats_py_fixes

CA_ENV = "O_NATS_TLS_CA"
CERT_ENV = "O_NATS_TLS_CERT"
KEY_ENV = "O_NATS_TLS_KEY"
FIRST_ENV = "O_NATS_TLS_FIRST"

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class TlsMisconfigured(ValueError):
    """The TLS settings name files that cannot be used, or only half of a key pair."""


@dataclass(frozen=True)
class NatsTls:
    """A client's TLS: whom it trusts (`ca_file`; None: the system's store) and who it is to
    servers that verify clients (`cert_file`, `key_file`)."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    handshake_first: bool = True
    context: ssl.SSLContext = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "context", self._context())

    def _context(self) -> ssl.SSLContext:
        if (self.cert_file is None) != (self.key_file is None):
            raise TlsMisconfigured(f"{CERT_ENV} and {KEY_ENV} go together: set both or neither")
        try:
            # Verifies the server's chain and its name (the URL's host) against the CA.
            context = ssl.create_default_context(
                cafile=str(self.ca_file) if self.ca_file is not None else None
            )
        except (OSError, ssl.SSLError) as exc:
            raise TlsMisconfigured(
                f"{CA_ENV}={self.ca_file}: not a usable CA file ({exc})"
            ) from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_file is not None and self.key_file is not None:
            try:
                context.load_cert_chain(str(self.cert_file), str(self.key_file))
            except (OSError, ssl.SSLError) as exc:
                raise TlsMisconfigured(
                    f"{CERT_ENV}={self.cert_file}, {KEY_ENV}={self.key_file}: "
                    f"not a usable certificate and key ({exc})"
                ) from None
        return context

    def options(self) -> dict[str, Any]:
        """Keyword arguments for `nats.connect`."""
        _quiet_eof_warning()
        nats_py_fixes.install()
        return {"tls": self.context, "tls_handshake_first": self.handshake_first}

    def security(self) -> Any:
        """The same for FastStream's `NatsBroker` (its `security=`)."""
        from faststream.nats.security import NatsSecurity

        _quiet_eof_warning()
        nats_py_fixes.install()
        return NatsSecurity(ssl_context=self.context, tls_handshake_first=self.handshake_first)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> NatsTls | None:
        """The TLS the environment asks for; None: plain TCP."""
        environ = os.environ if environ is None else environ
        ca, cert, key = (environ.get(name) or None for name in (CA_ENV, CERT_ENV, KEY_ENV))
        url = (environ.get("NATS_URL") or "").strip().lower()
        if ca is None and cert is None and key is None and not url.startswith("tls://"):
            return None
        first = (environ.get(FIRST_ENV) or "1").strip().lower()
        if first not in _TRUE | _FALSE:
            raise TlsMisconfigured(f"{FIRST_ENV} must be 1 or 0, not {first!r}")
        return cls(
            ca_file=Path(ca) if ca else None,
            cert_file=Path(cert) if cert else None,
            key_file=Path(key) if key else None,
            handshake_first=first in _TRUE,
        )


# asyncio's own TLS transport (the tools' event loop; the services run uvloop's) logs this at
# every close of a nats-py connection over TLS: nats-py's stream protocol asks to keep the
# socket half open, which TLS cannot. The connection is ending either way; the line would only
# end up in the output of `python -m o_ops` and the supervisor's log.
_EOF_WARNING = "returning true from eof_received() has no effect when using ssl"


class _QuietEofWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != _EOF_WARNING


_QUIET = _QuietEofWarning()


def _quiet_eof_warning() -> None:
    logging.getLogger("asyncio").addFilter(_QUIET)  # (once: a filter is added only once)

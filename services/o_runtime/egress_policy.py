"""Which addresses O may send a request to on someone else's word: no SSRF through O.

A completion callback's URL comes from a client, a page `fetch_webpage` reads from a
model, and O sends both from inside the operator's network. So, unless the operator
allows them (O_CALLBACK_ALLOWED_TARGETS, O_WEB_ALLOWED_TARGETS), O refuses every address
that is not public: loopback, private, link-local (the cloud metadata service at
169.254.169.254 among them), shared (100.64.0.0/10, where some clouds keep theirs),
unspecified, reserved, multicast, and IPv6's equivalents (an IPv4 address mapped into
IPv6 is judged as the IPv4 it is).

Before anything is sent only what the URL says by itself is judged: a literal address,
or a name that always means "inside" (localhost, *.internal ...). A host name is
resolved when the request is made, every address it resolves to is judged, and the
connection goes to one of those checked addresses (pinned_http.py), so a name that
resolves elsewhere a moment later (DNS rebinding) cannot slip through.
Pure functions: no I/O here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Names that mean "inside" by themselves, whatever they resolve to.
_INTERNAL_NAMES = frozenset({"localhost", "metadata.google.internal", "metadata"})
_INTERNAL_SUFFIXES = (".localhost", ".local", ".localdomain", ".home.arpa", ".internal", ".svc")


def normal_host(host: str) -> str:
    return host.rstrip(".").lower()


def literal_address(host: str) -> Address | None:
    """The address a URL's host names literally (brackets and IPv6 zones removed)."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def _judged(address: Address) -> Address:
    """An IPv4 address mapped into IPv6 (::ffff:10.0.0.1) is that IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True)
class TargetPolicy:
    """Addresses not public are refused, except in `networks`; names in `hosts` are not
    checked at all (the operator vouches for them)."""

    networks: tuple[Network, ...] = ()
    hosts: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str) -> TargetPolicy:
        """`10.0.0.0/8, 127.0.0.1, hooks.example.internal`: networks, addresses and names,
        separated by commas or spaces. ValueError names an item that is none of them."""
        networks: list[Network] = []
        hosts: set[str] = set()
        for item in text.replace(",", " ").split():
            if "/" in item or literal_address(item) is not None:
                try:
                    networks.append(ipaddress.ip_network(item.strip("[]"), strict=False))
                except ValueError:
                    raise ValueError(f"{item!r} is not a network or an address") from None
            elif _is_host_name(item):
                hosts.add(normal_host(item))
            else:
                raise ValueError(f"{item!r} is not a network, an address or a host name")
        return cls(tuple(networks), frozenset(hosts))

    def allows_host(self, host: str) -> bool:
        return normal_host(host) in self.hosts

    def address_refusal(self, address: Address) -> str | None:
        """Why O may not send to `address`, or None if it may."""
        judged = _judged(address)
        if any(judged in n or address in n for n in self.networks):
            return None
        if judged.is_global and not judged.is_multicast:
            return None
        return f"{judged} is {_kind(judged)}, not a public address"

    def addresses_refusal(self, host: str, addresses: Iterable[Address]) -> str | None:
        """Why O may not send to `host` resolved to `addresses` (every one must pass)."""
        if self.allows_host(host):
            return None
        for address in addresses:
            refusal = self.address_refusal(address)
            if refusal is not None:
                return f"{host} resolves to {refusal}" if literal_address(host) is None else refusal
        return None

    def url_refusal(self, url: str) -> str | None:
        """What the URL alone shows is refused (a literal address, an internal name); None
        if nothing does (a host name is judged again, resolved, at delivery)."""
        host = urlsplit(url).hostname or ""
        if self.allows_host(host):
            return None
        address = literal_address(host)
        if address is not None:
            return self.address_refusal(address)
        name = normal_host(host)
        if name in _INTERNAL_NAMES or name.endswith(_INTERNAL_SUFFIXES):
            return f"{name} is a name inside this network"
        return None


def _is_host_name(item: str) -> bool:
    labels = normal_host(item).split(".")
    return all(
        0 < len(label) <= 63 and label.replace("-", "").replace("_", "").isalnum()
        for label in labels
    )


# Cloud metadata services (AWS, GCP, Azure, OpenStack; AWS over IPv6; Alibaba): what an
# SSRF is usually after. Each is refused anyway; this only names it so.
_METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)


def _kind(address: Address) -> str:
    """The reason an address is not public, as an operator would say it."""
    if address in _METADATA:
        return "a cloud metadata address"
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    if address.is_reserved:
        return "reserved"
    return "not globally routable"

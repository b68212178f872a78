"""Where a completion callback may go: public addresses, unless the operator allows more."""

from __future__ import annotations

import ipaddress
import re

import httpx
import pytest
from fastapi import HTTPException
from pydantic import TypeAdapter, ValidationError

from o_contracts.callback_urls import CallbackUrl
from o_gateway.callbacks.accept import accepted_callback_url
from o_gateway.callbacks.settings import CallbackSettings
from o_runtime.egress_policy import TargetPolicy
from o_runtime.env import BadSetting, Env
from o_runtime.pinned_http import pinned

DEFAULT = TargetPolicy()


def refusal(address: str, policy: TargetPolicy = DEFAULT) -> str | None:
    return policy.address_refusal(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("169.254.169.254", "a cloud metadata address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("100.100.100.200", "a cloud metadata address"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("169.254.10.10", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("100.64.0.1", "not globally routable"),
        ("fc00::1", "private"),
    ],
)
def test_addresses_that_are_not_public_are_refused_by_default(address: str, kind: str) -> None:
    assert refusal(address) == f"{address} is {kind}, not a public address"


def test_an_ipv4_address_mapped_into_ipv6_is_judged_as_itself() -> None:
    assert refusal("::ffff:10.0.0.1") == "10.0.0.1 is private, not a public address"
    assert refusal("::ffff:8.8.8.8") is None


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    assert refusal(address) is None


def test_the_operator_allows_networks_addresses_and_names() -> None:
    policy = TargetPolicy.parse("127.0.0.1, 10.1.0.0/16 hooks.corp.internal")
    assert refusal("127.0.0.1", policy) is None
    assert refusal("10.1.200.3", policy) is None
    assert refusal("10.2.0.1", policy) == "10.2.0.1 is private, not a public address"
    assert refusal("127.0.0.2", policy) == "127.0.0.2 is loopback, not a public address"
    assert policy.url_refusal("https://HOOKS.corp.internal./x") is None
    # A name the operator vouches for is not resolved and judged.
    inside = [ipaddress.ip_address("10.9.9.9")]
    assert policy.addresses_refusal("hooks.corp.internal", inside) is None


def test_a_bad_allowed_target_is_named() -> None:
    with pytest.raises(ValueError, match=re.escape("'10.0.0.0/33'")):
        TargetPolicy.parse("10.0.0.0/33")
    with pytest.raises(ValueError, match="'ex@mple'"):
        TargetPolicy.parse("ok.example, ex@mple")


def test_at_request_time_literal_addresses_and_internal_names_are_judged() -> None:
    assert DEFAULT.url_refusal("http://169.254.169.254/latest/meta-data") == (
        "169.254.169.254 is a cloud metadata address, not a public address"
    )
    assert DEFAULT.url_refusal("http://10.0.0.1:8080/hook") == (
        "10.0.0.1 is private, not a public address"
    )
    assert DEFAULT.url_refusal("http://[::1]:9000/") == "::1 is loopback, not a public address"
    assert DEFAULT.url_refusal("http://localhost:9000/") == (
        "localhost is a name inside this network"
    )
    assert DEFAULT.url_refusal("http://metadata.google.internal/") == (
        "metadata.google.internal is a name inside this network"
    )
    # A name is resolved and judged at delivery, not here.
    assert DEFAULT.url_refusal("https://hooks.example.com/o") is None


def test_a_name_is_refused_when_any_address_it_resolves_to_is() -> None:
    addresses = [ipaddress.ip_address(a) for a in ("93.184.216.34", "10.0.0.7")]
    assert DEFAULT.addresses_refusal("rebind.example.com", addresses) == (
        "rebind.example.com resolves to 10.0.0.7 is private, not a public address"
    )
    assert DEFAULT.addresses_refusal("ok.example.com", addresses[:1]) is None


def test_the_connection_goes_to_the_checked_address_and_keeps_the_name() -> None:
    https = pinned("https://hooks.example.com:8443/o?x=1", ipaddress.ip_address("93.184.216.34"))
    assert https.url == httpx.URL("https://93.184.216.34:8443/o?x=1")
    assert https.headers == {"Host": "hooks.example.com:8443"}
    assert https.extensions == {"sni_hostname": "hooks.example.com"}
    six = pinned("http://hooks.example.com/o", ipaddress.ip_address("2606:4700::1"))
    assert six.url == httpx.URL("http://[2606:4700::1]/o")
    assert six.headers == {"Host": "hooks.example.com"}
    assert six.extensions == {}


URL = TypeAdapter(CallbackUrl)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://x", "must be an http:// or https:// URL, not ftp://"),
        ("file:///etc/passwd", "must be an http:// or https:// URL, not file://"),
        ("hooks.example.com/o", "must be an http:// or https:// URL, not none://"),
        ("http:///path", "must name a host"),
        ("https://user:pw@hooks.example.com/", "must not carry credentials"),
        ("http://hooks.example.com:99999/", "not a URL"),
        ("http://hooks.example.com/a b", "must not contain whitespace"),
        ("http://x/" + "a" * 2048, "at most 2048 characters"),
    ],
)
def test_a_callback_url_must_be_an_absolute_http_url(url: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        URL.validate_python(url)


def test_a_good_callback_url_is_kept_as_given() -> None:
    assert URL.validate_python("https://hooks.example.com/o?run=1") == (
        "https://hooks.example.com/o?run=1"
    )


def test_without_a_secret_a_callback_url_is_refused_at_the_api() -> None:
    with pytest.raises(HTTPException) as refused:
        accepted_callback_url("https://hooks.example.com/o", CallbackSettings())
    assert refused.value.status_code == 400
    assert "O_CALLBACK_SECRET" in str(refused.value.detail)
    assert accepted_callback_url(None, CallbackSettings()) is None


def test_the_api_refuses_what_the_url_shows_by_itself_naming_the_field() -> None:
    settings = CallbackSettings(secret="s" * 16)
    with pytest.raises(HTTPException) as refused:
        accepted_callback_url("http://10.0.0.1/hook", settings)
    assert refused.value.status_code == 422
    assert refused.value.detail == [
        {
            "type": "value_error",
            "loc": ["body", "callback_url"],
            "msg": "callback_url is refused: 10.0.0.1 is private, not a public address",
        }
    ]
    assert accepted_callback_url("https://hooks.example.com/o", settings) == (
        "https://hooks.example.com/o"
    )


def test_bad_settings_stop_the_gateway_at_start_naming_them() -> None:
    with pytest.raises(BadSetting, match="O_CALLBACK_SECRET must be at least 16"):
        CallbackSettings.from_env(Env({"O_CALLBACK_SECRET": "short"}))
    with pytest.raises(BadSetting, match="O_CALLBACK_ALLOWED_TARGETS: 'ex@mple'"):
        CallbackSettings.from_env(Env({"O_CALLBACK_ALLOWED_TARGETS": "ex@mple"}))
    with pytest.raises(BadSetting, match="O_CALLBACK_RETRY_FOR must be at most"):
        CallbackSettings.from_env(Env({"O_CALLBACK_RETRY_FOR": str(7 * 24 * 3600)}))
    read = CallbackSettings.from_env(Env({"O_CALLBACK_ALLOWED_TARGETS": "127.0.0.1"}))
    assert read.targets.networks == (ipaddress.ip_network("127.0.0.1/32"),)
    assert (read.secret, read.retry_for, read.timeout) == (None, 24 * 3600.0, 10.0)

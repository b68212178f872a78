"""Several gateway processes on one port: `make run`'s O_GATEWAY_REPLICAS has them bind with
SO_REUSEPORT (O_HTTP_REUSE_PORT), and only then (docs/throughput.md)."""

from __future__ import annotations

import socket

import pytest

from o_devtools.supervisor import services_from_env
from o_gateway.service import listening_socket
from o_gateway.settings import GatewaySettings
from o_runtime.env import BadSetting, Env


def gateway_env(env: dict[str, str]) -> dict[str, str]:
    (spec,) = [s for s in services_from_env({"O_SERVICES": "gateway", **env})]
    return {**spec.env, "replicas": str(spec.replicas)}


def test_gateway_replicas_share_the_port_through_reuse_port() -> None:
    assert gateway_env({"O_GATEWAY_REPLICAS": "2", "O_HTTP_PORT": "9000"}) == {
        "O_HTTP_HOST": "127.0.0.1",
        "O_HTTP_PORT": "9000",
        "O_HTTP_REUSE_PORT": "1",
        "replicas": "2",
    }


def test_one_gateway_binds_alone() -> None:
    assert "O_HTTP_REUSE_PORT" not in gateway_env({})
    assert GatewaySettings.from_env(Env({})).http_reuse_port is False
    assert GatewaySettings.from_env(Env({"O_HTTP_REUSE_PORT": "1"})).http_reuse_port is True


def test_two_reuse_port_sockets_bind_one_port_and_a_plain_one_cannot() -> None:
    first = listening_socket("127.0.0.1", 0)
    port = first.getsockname()[1]
    second = listening_socket("127.0.0.1", port)
    plain = socket.socket()
    try:
        assert second.getsockname() == ("127.0.0.1", port)
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    finally:
        for s in (first, second, plain):
            s.close()


def test_the_read_cache_budget_is_a_setting() -> None:
    assert GatewaySettings.from_env(Env({})).read_cache_bytes == 32 * 1024 * 1024
    assert GatewaySettings.from_env(Env({"O_READ_CACHE_BYTES": "0"})).read_cache_bytes == 0
    with pytest.raises(BadSetting, match="O_READ_CACHE_BYTES must be at least 0"):
        GatewaySettings.from_env(Env({"O_READ_CACHE_BYTES": "-1"}))

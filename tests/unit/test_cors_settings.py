"""Which browser origins the gateway allows (o_gateway/settings.py)."""

from __future__ import annotations

from o_gateway.settings import LETTA_ORIGINS, GatewaySettings
from o_runtime.env import Env


def test_letta_defaults_with_the_ade_and_acceptable_origins_added() -> None:
    env = Env({"ACCEPTABLE_ORIGINS": "https://console.example.com, https://b.example/"})
    origins = GatewaySettings.from_env(env).cors_origins
    assert origins[: len(LETTA_ORIGINS)] == LETTA_ORIGINS
    assert "https://app.letta.com" in origins
    assert origins[len(LETTA_ORIGINS) :] == ("https://console.example.com", "https://b.example")


def test_o_cors_origins_replaces_the_defaults() -> None:
    env = Env({"O_CORS_ORIGINS": "https://only.example", "ACCEPTABLE_ORIGINS": "https://x.example"})
    origins = GatewaySettings.from_env(env).cors_origins
    assert origins == ("https://only.example", "https://x.example")

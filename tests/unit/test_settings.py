"""Settings are read once at a service's start, typed and validated: a bad value stops the
service at once with the variable's name and what it must be."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from o_executor.settings import ExecutorSettings
from o_gateway.settings import GatewaySettings
from o_runtime.env import BadSetting, Env
from o_runtime.settings import ProjectionSettings, Settings
from o_tool_sandbox.limits import SandboxSettings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_when_nothing_is_set() -> None:
    env = Env({})
    assert ExecutorSettings.from_env(env) == ExecutorSettings()
    assert GatewaySettings.from_env(env) == GatewaySettings()
    assert ProjectionSettings.from_env(env) == ProjectionSettings()
    assert SandboxSettings.from_env(env).concurrency == 8


def test_values_are_read_and_typed() -> None:
    env = Env(
        {
            "O_EXECUTOR_ACK_WAIT": "2.5",
            "O_LLM_MAX_RETRIES": "0",
            "O_HTTP_PORT": "9000",
            "O_OPEN_DOCS": "true",
            "O_PROJECTION_SKIP_LAG": "0",
            "O_SANDBOX_MEMORY_MB": "256",
        }
    )
    executor = ExecutorSettings.from_env(env)
    assert (executor.ack_wait, executor.llm.max_retries) == (2.5, 0)
    gateway = GatewaySettings.from_env(env)
    assert (gateway.http_port, gateway.open_docs) == (9000, True)
    assert ProjectionSettings.from_env(env).skip_lag == 0.0
    assert SandboxSettings.from_env(env).limits.memory_bytes == 256 << 20


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("O_EXECUTOR_ACK_WAIT", "soon", "O_EXECUTOR_ACK_WAIT must be a number, not 'soon'"),
        ("O_EXECUTOR_ACK_WAIT", "0", "O_EXECUTOR_ACK_WAIT must be at least 0.5, not 0"),
        ("O_HTTP_PORT", "80.5", "O_HTTP_PORT must be a whole number, not '80.5'"),
        ("O_OPEN_DOCS", "maybe", "O_OPEN_DOCS must be 1 or 0 (true or false), not 'maybe'"),
        ("O_MAX_BODY_BYTES", "10", "O_MAX_BODY_BYTES must be at least 1024, not 10"),
        ("O_SANDBOX_CONCURRENCY", "-1", "O_SANDBOX_CONCURRENCY must be at least 1, not -1"),
    ],
)
def test_a_bad_value_names_the_variable_and_what_it_must_be(
    name: str, value: str, says: str
) -> None:
    env = Env({name: value})
    with pytest.raises(BadSetting) as raised:
        ExecutorSettings.from_env(env)
        GatewaySettings.from_env(env)
        SandboxSettings.from_env(env)
    assert str(raised.value) == says


def test_a_bad_log_level_is_refused() -> None:
    env = Env({"NATS_URL": "nats://x", "DATABASE_URL": "postgres://x", "O_LOG_LEVEL": "loud"})
    with pytest.raises(BadSetting, match="O_LOG_LEVEL"):
        Settings.from_env("gateway", True, env)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        (
            "O_EXECUTOR_ACK_WAIT",
            "soon",
            "executor: O_EXECUTOR_ACK_WAIT must be a number, not 'soon'",
        ),
        # Read lazily by whoever needs them, but checked at every service's start.
        ("O_SECRETS_KEY", "not-a-key", "executor: O_SECRETS_KEY is not a valid Fernet key"),
        (
            "O_PROVIDER_LAB_TYPE",
            "gemini",
            "executor: O_PROVIDER_LAB_TYPE must be openai or anthropic",
        ),
    ],
)
def test_a_service_with_a_bad_setting_stops_at_start_saying_why(
    name: str, value: str, says: str
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("contracts", "services", ".")),
        "NATS_URL": "nats://127.0.0.1:1",  # never reached: the setting is read first
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "O_PROVIDER_LAB_BASE_URL": "http://127.0.0.1:1/v1",
        name: value,
    }
    done = subprocess.run(
        [sys.executable, "-m", "o_executor"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert says in done.stderr

"""Sandbox configurations (Letta's `/v1/sandbox-config/`), appended by the gateway on
`o.evt.sandbox_config.<sandbox_config_id>`.

One configuration per sandbox type ("local", "e2b", "modal"); O's own sandbox uses the
"local" one: its environment variables reach every tool run (beneath the agent's own
secrets), and its `pip_requirements` are installed for every tool (docs/sandbox.md). The
others are kept for clients that set them.

A configuration's environment variables are part of it (the same subject), so a change to
either is decided on the configuration's row as read. Their values travel encrypted
(Fernet, `O_SECRETS_KEY`, as an agent's secrets do): the log, the projection and the
commands that carry them hold ciphertext only.
"""

from __future__ import annotations

from typing import Any, Literal

from o_contracts.base import Event

SandboxType = Literal["local", "e2b", "modal"]


class SandboxConfigCreated(Event):
    sandbox_config_id: str
    sandbox_type: SandboxType
    # The type's settings, as Letta stores them (LocalSandboxConfig's sandbox_dir, use_venv,
    # venv_name, pip_requirements; E2B's timeout, template, ...).
    config: dict[str, Any]


class SandboxConfigUpdated(Event):
    """The whole new `config` (the type never changes)."""

    sandbox_config_id: str
    config: dict[str, Any]


class SandboxConfigDeleted(Event):
    """The configuration and its environment variables are gone."""

    sandbox_config_id: str


class SandboxEnvVarSet(Event):
    """An environment variable made, or changed (its key, value or description)."""

    sandbox_config_id: str
    env_var_id: str
    key: str
    encrypted_value: str
    description: str | None = None


class SandboxEnvVarDeleted(Event):
    sandbox_config_id: str
    env_var_id: str

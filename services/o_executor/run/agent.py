"""The agent a run works for: its configuration as the run reads it, typed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from o_contracts.agent_types import DEFAULT_AGENT_TYPE, uses_heartbeats
from o_contracts.base_tools import EVOLUTION_TOOLS
from o_contracts.evolution import AppendText, Patch, ReplaceText, ServedVersion, VersionSpec
from o_contracts.pip_requirements import PipRequirement
from o_contracts.prompts import default_system
from o_contracts.text_edits import block_edits
from o_executor.model_settings import ModelSettings
from o_runtime import llm_providers
from o_runtime.sandbox_settings import LocalSandbox

DEFAULT_WINDOW = 128000


@dataclass(frozen=True)
class McpServerRef:
    """Where an MCP tool's server is; its token and header values as ciphertext. A stdio
    server is how the tool sandbox starts it (its environment as ciphertext too)."""

    server_type: str
    url: str | None
    auth_header: str | None
    encrypted_auth_token: str | None
    encrypted_custom_headers: dict[str, str] | None
    server_id: str = ""
    command: str | None = None
    args: tuple[str, ...] = ()
    encrypted_env: dict[str, str] | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> McpServerRef:
        return cls(
            server_type=row["server_type"],
            url=row.get("url"),
            auth_header=row.get("auth_header"),
            encrypted_auth_token=row.get("encrypted_auth_token"),
            encrypted_custom_headers=row.get("encrypted_custom_headers"),
            server_id=row.get("server_id") or "",
            command=row.get("command"),
            args=tuple(row.get("args") or ()),
            encrypted_env=row.get("encrypted_env"),
        )


@dataclass(frozen=True)
class UserTool:
    """A user's tool attached to the agent; it runs in the sandbox (its source travels
    along), or, with `mcp`, an MCP server's tool that the executor calls on its server."""

    id: str
    name: str
    source_code: str
    json_schema: dict[str, Any]
    return_char_limit: int
    idempotent: bool
    mcp: McpServerRef | None = None
    # Packages its source imports (the sandbox installs them).
    requirements: tuple[PipRequirement, ...] = ()

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> UserTool:
        return cls(
            id=row["id"],
            name=row["name"],
            source_code=row["source_code"],
            json_schema=dict(row["json_schema"]),
            return_char_limit=int(row["return_char_limit"]),
            idempotent=bool(row["idempotent"]),
            mcp=McpServerRef.from_row(row["mcp"]) if row.get("mcp") else None,
            requirements=tuple(
                PipRequirement.model_validate(r) for r in row.get("pip_requirements") or ()
            ),
        )


@dataclass(frozen=True)
class ModelChoice:
    """The model a run asks: its handle, its window, what it is asked for."""

    handle: str
    window: int
    settings: ModelSettings

    @classmethod
    def of(cls, llm_config: Mapping[str, Any]) -> ModelChoice:
        return cls(
            handle=str(llm_config.get("handle") or ""),
            window=int(llm_config.get("context_window") or DEFAULT_WINDOW),
            settings=ModelSettings.from_llm_config(llm_config),
        )

    @classmethod
    def override(cls, handle: str, settings: Mapping[str, Any] | None = None) -> ModelChoice:
        """override_model: that model with its defaults (and `settings` over them), for one
        request (as Letta, which uses the handle's own llm_config, not the agent's
        settings)."""
        provider, _, model = handle.partition("/")
        chosen = ModelSettings.from_llm_config(settings) if settings else ModelSettings()
        try:
            config = llm_providers.provider(provider)
        except llm_providers.ProviderNotConfigured:
            # A provider registered through the API that this process has not read yet:
            # the model call reads it (provider_registry.py), or says it is unknown.
            return cls(handle, llm_providers.DEFAULT_CONTEXT_WINDOW, chosen)
        return cls(handle, llm_providers.context_window(model, config), chosen)


@dataclass(frozen=True)
class Rollout:
    """The agent's running canary (o_evolution): the candidate version takes `weight`
    percent of conversations."""

    rollout_id: str
    weight: float
    version_id: str
    stable_version: str
    spec: VersionSpec
    # The proposal's edits to evolvable blocks, by label: the candidate arm makes them on
    # the blocks as they are at each run (o_executor/run/versions.py).
    edits: dict[str, list[ReplaceText | AppendText]] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Rollout:
        patch = row.get("patch")
        return cls(
            rollout_id=row["rollout_id"],
            weight=float(row["weight"]),
            version_id=row["version_id"],
            stable_version=row["stable_version"],
            spec=VersionSpec.model_validate(row["spec"]),
            edits=block_edits(Patch.model_validate(patch)) if patch else {},
        )


def _evolves_itself(config: Mapping[str, Any] | None, tools: Sequence[str]) -> bool:
    if not config or not config.get("enabled"):
        return False
    return bool(config.get("tools_for_agent")) or any(t in EVOLUTION_TOOLS for t in tools)


def _primary_evolving(primary: Mapping[str, Any] | None) -> str | None:
    if not primary or not (primary.get("config") or {}).get("enabled"):
        return None
    return str(primary["agent_id"])


@dataclass(frozen=True)
class AgentConfig:
    id: str
    name: str
    system: str | None
    agent_type: str
    llm_config: dict[str, Any]
    # Built-in tools by name; users' tools by name.
    tools: tuple[str, ...] = ()
    tool_rules: tuple[dict[str, Any], ...] = ()
    user_tools: dict[str, UserTool] = field(default_factory=dict)
    # Fernet ciphertexts: the sandbox decrypts them (the executor's key is only for MCP
    # servers' tokens and headers, o_executor/mcp_calls.py).
    encrypted_secrets: dict[str, str] = field(default_factory=dict)
    # What the local sandbox configuration adds to every tool run (variables, packages).
    sandbox: LocalSandbox = field(default_factory=LocalSandbox)
    # The running canary, if any: a run takes its arm (o_executor/run/versions.py).
    rollout: Rollout | None = None
    # The arm this run took (recorded in RunStarted.version), once chosen.
    served: ServedVersion | None = None
    # Block values by label that take the place of the agent's (a version's).
    block_values: dict[str, str] = field(default_factory=dict)
    # Edits made on the agent's blocks, by label, as each prompt is built (a canary's
    # candidate); where they no longer apply, block_values' text stands in.
    block_edits: dict[str, list[ReplaceText | AppendText]] = field(default_factory=dict)
    # Whose evolution this agent may act on with its evolution tools, as configured
    # (o_executor/run/evolution_tools.py decides): its own, if its evolution is on and
    # the operator gave it the tools (or they are attached); its primary's, if it is a
    # sleep-time companion of an agent whose evolution is on.
    evolution_own: bool = False
    evolution_primary: str | None = None
    # The agent the evolution tools act on in this run (None: the tools are absent).
    evolution_target: str | None = None
    # Its concurrency default (o_contracts/concurrency.py; None: the route's), and
    # whether it has a sleep-time companion: told to the gateway in a run's reply.
    concurrency: str | None = None
    enable_sleeptime: bool = False

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> AgentConfig:
        users = row.get("user_tools") or {}
        if isinstance(users, list):
            users = {t["name"]: t for t in users}
        return cls(
            id=row["id"],
            name=row.get("name") or "",
            system=row.get("system"),
            agent_type=row["agent_type"],
            llm_config=dict(row.get("llm_config") or {}),
            tools=tuple(row.get("tools") or ()),
            tool_rules=tuple(dict(r) for r in row.get("tool_rules") or ()),
            user_tools={name: UserTool.from_row(t) for name, t in users.items()},
            encrypted_secrets=dict(row.get("encrypted_secrets") or {}),
            sandbox=LocalSandbox.of(row.get("sandbox_env"), row.get("sandbox_requirements")),
            rollout=Rollout.from_row(row["rollout"]) if row.get("rollout") else None,
            evolution_own=_evolves_itself(row.get("own_evolution"), row.get("tools") or ()),
            evolution_primary=_primary_evolving(row.get("primary_evolution")),
            concurrency=row.get("concurrency"),
            enable_sleeptime=bool(row.get("enable_sleeptime")),
        )

    @classmethod
    def deleted(cls, agent_id: str) -> AgentConfig:
        """An agent that no longer exists: only its id is known (its runs end cancelled)."""
        return cls(id=agent_id, name="", system=None, agent_type=DEFAULT_AGENT_TYPE, llm_config={})

    @property
    def heartbeats(self) -> bool:
        return uses_heartbeats(self.agent_type)

    @property
    def model(self) -> ModelChoice:
        return ModelChoice.of(self.llm_config)

    @property
    def system_prompt(self) -> str:
        return self.system or default_system(self.agent_type)

    @property
    def available(self) -> set[str]:
        """Every tool the agent has: tool rules apply to built-in and users' tools alike."""
        return set(self.tools) | set(self.user_tools)

    def has_tool(self, name: str) -> bool:
        return name in self.tools or name in self.user_tools

"""An agent file and Letta's import options, decided into what will be written.

Everything that can refuse a file is here, before anything exists: its
references, every agent's model and blocks and rules, every tool's source, the
sizes of the events. What the plan names is derived from the import's id (from
the request's Idempotency-Key when it has one), so a retried import names the
same tools, blocks, agents, messages and groups, and writes each once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException
from pydantic import TypeAdapter, ValidationError

from o_contracts.agent_types import AGENT_TYPES
from o_contracts.base_tools import BASE_TOOLS, FILE_TOOLS, SCHEMAS
from o_contracts.events import FolderAttached, GroupCreated, ImportedMessage
from o_contracts.events.groups import MANAGER_TYPES
from o_contracts.ids import derived_id
from o_contracts.models import ChatMessage
from o_contracts.prompts import default_system
from o_contracts.system_prompt import compile_system
from o_contracts.tool_rules import ToolRuleSolver
from o_gateway.agent_files.folders_plan import NewFolder, folder_id_of, plan_folders
from o_gateway.agent_files.history import history
from o_gateway.agent_files.mcp_plan import NewMcpServer, plan_mcp_servers
from o_gateway.agent_files.references import check_references
from o_gateway.agent_files.schema import AgentFile, FileAgent, FileBlock, FileGroup
from o_gateway.agent_files.tools_plan import ToolChoice, ToolsPlan, ToolWrite, plan_tools
from o_gateway.agent_requests import block_spec, secrets_of
from o_gateway.decisions import CreateAgent, NewBlock, UserTool, decide
from o_gateway.decisions.checks import check_unique_names, checked_rules
from o_gateway.models_config import embedding_config_for, llm_config_for
from o_gateway.schemas import AgentName, CreateBlockBody

# An agent's creation event (its system prompt compiled with all its blocks) must fit
# in one NATS message with room to spare.
AGENT_EVENT_BYTES = 900 * 1024
# llm_config fields that say where the model is served: O's own, for the handle.
_ENDPOINT_FIELDS = frozenset(
    {
        "model",
        "model_endpoint",
        "model_endpoint_type",
        "provider_name",
        "provider_category",
        "handle",
        "display_name",
    }
)
_SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_AGENT_NAME: TypeAdapter[str] = TypeAdapter(AgentName)
_NEEDS_MANAGER = ("supervisor", "dynamic", "sleeptime")


@dataclass(frozen=True)
class ImportOptions:
    """Letta's import form (POST /v1/agents/import), its deprecated spellings resolved."""

    append_copy_suffix: bool = True
    name: str | None = None
    override_existing_tools: bool = True
    strip_messages: bool = False
    secrets: dict[str, str] | None = None
    model: str | None = None
    embedding: str | None = None


@dataclass(frozen=True)
class Registry:
    """What the plan needs to know of O, read before planning."""

    # O's user tools by name (the oldest of a name, as `PUT /v1/tools/` finds it).
    tools_by_name: dict[str, dict[str, Any]]
    # MCP servers' tools by (server name, tool name).
    mcp_tools: dict[tuple[str, str], dict[str, Any]]
    # MCP servers by name, and the names of folders (neither of them this import's own:
    # a retried import decides as its first try did).
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    folder_names: set[str] = field(default_factory=set)
    # O_MCP_ALLOW_PRIVATE_URLS: a file's server may have a private address.
    allow_private_mcp_urls: bool = False


@dataclass
class AgentWrite:
    command: CreateAgent
    # Its history, one MessagesImported per part; the images it shows, to store first.
    parts: list[list[ImportedMessage]]
    images: dict[str, bytes]
    left_out: list[str]
    # Its folders, attached after its history (the file tools added by the first).
    folders: list[FolderAttached] = field(default_factory=list)


@dataclass
class ImportPlan:
    import_id: str
    images: dict[str, bytes] = field(default_factory=dict)
    mcp_servers: list[NewMcpServer] = field(default_factory=list)
    folders: list[NewFolder] = field(default_factory=list)
    tools: list[ToolWrite] = field(default_factory=list)
    blocks: list[NewBlock] = field(default_factory=list)
    agents: list[AgentWrite] = field(default_factory=list)
    groups: list[GroupCreated] = field(default_factory=list)
    # Agents whose file asks for a sleep-time companion it does not bring.
    sleeptime: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def plan_import(
    file: AgentFile,
    options: ImportOptions,
    registry: Registry,
    import_id: str,
    key: str | None,
) -> ImportPlan:
    """The writes of an import (HTTPException if the file cannot be imported whole)."""
    check_references(file)
    plan = ImportPlan(import_id=import_id)
    mcp = plan_mcp_servers(file, registry.mcp_servers, import_id, registry.allow_private_mcp_urls)
    plan.mcp_servers = mcp.servers
    plan.left_out += mcp.left_out
    mcp_tools = {key: row["id"] for key, row in registry.mcp_tools.items()} | mcp.tools
    tools = plan_tools(
        file.tools,
        registry.tools_by_name,
        mcp_tools,
        import_id,
        options.override_existing_tools,
    )
    plan.tools = tools.writes
    plan.left_out += [c.reason for c in tools.choices.values() if c.reason]
    blocks = {b.id: _file_block(b, import_id, plan.left_out) for b in file.blocks}
    plan.blocks = list(blocks.values())
    agent_ids = {a.id: derived_id("agent", import_id, a.id) for a in file.agents}
    managers = {
        g.manager_config.get("manager_agent_id")
        for g in file.groups
        if g.manager_config.get("manager_type") == "sleeptime"
    }
    for agent in file.agents:
        # A sleep-time group's manager keeps its memory through the group's companion.
        sleeptime = True if agent.id in managers else agent.enable_sleeptime
        write = _agent(agent, agent_ids[agent.id], sleeptime, options, registry, tools, blocks, key)
        write.folders = _attachments(agent, write.command, import_id)
        plan.agents.append(write)
        plan.left_out += write.left_out
        plan.images |= write.images
        if agent.enable_sleeptime and agent.id not in managers:
            plan.sleeptime.append(agent_ids[agent.id])
    plan.groups = [_group(g, import_id, agent_ids, plan) for g in file.groups]
    folders = plan_folders(file, import_id, registry.folder_names, options.embedding)
    plan.folders = list(folders.folders.values())
    plan.left_out += folders.left_out
    if file.skills:
        # Letta's import reads no skills either: a client resolves them and sends them
        # with its messages.
        plan.left_out.append(
            f"{len(file.skills)} skills: skills are the client's; the server keeps none"
        )
    return plan


def _attachments(agent: FileAgent, command: CreateAgent, import_id: str) -> list[FolderAttached]:
    """The agent's folders as a client would attach them, one after the other: the first
    gives it the file tools it lacks (routes/agent_folders.py)."""
    out = []
    tools = list(command.tools)
    for ref in agent.folder_refs:
        missing = [t for t in FILE_TOOLS if t not in tools]
        tools += missing
        out.append(
            FolderAttached(
                agent_id=command.agent_id,
                folder_id=folder_id_of(import_id, ref),
                tools=list(tools) if missing else None,
            )
        )
    return out


def _file_block(block: FileBlock, import_id: str, left_out: list[str]) -> NewBlock:
    block_id = derived_id("block", import_id, block.id)
    fields = block.model_dump(exclude={"id"})
    if len(block.value) > block.limit:
        # Letta exports such blocks (its limit is checked on edits, not on every
        # write): the value is kept whole, and the limit made to hold it.
        fields["limit"] = len(block.value)
        left_out.append(
            f"block '{block.label}' ({block.id}): its value is {len(block.value)} characters,"
            f" over its limit of {block.limit}; the limit was raised to hold it"
        )
    body = CreateBlockBody.model_validate(fields)
    return NewBlock(block_id, block_spec(body), derived_id("cmd", block_id, "create"))


def _agent(
    agent: FileAgent,
    agent_id: str,
    sleeptime: bool | None,
    options: ImportOptions,
    registry: Registry,
    tools: ToolsPlan,
    blocks: dict[str, NewBlock],
    key: str | None,
) -> AgentWrite:
    where = f"agent '{agent.name}' ({agent.id})"
    if agent.agent_type not in AGENT_TYPES:
        raise HTTPException(
            422,
            f"{where}: agent type '{agent.agent_type}' is not served by O"
            f" (one of: {', '.join(AGENT_TYPES)})",
        )
    inline = [
        NewBlock(
            derived_id("block", agent_id, "inline", str(i)),
            block_spec(CreateBlockBody.model_validate(b.model_dump())),
            derived_id("cmd", agent_id, "inline", str(i)),
        )
        for i, b in enumerate(agent.memory_blocks)
    ]
    attached = [blocks[b] for b in agent.block_ids or []]
    labels = [b.spec.label for b in [*inline, *attached]]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise HTTPException(422, f"{where}: two of its blocks are labelled '{repeated[0]}'")
    left_out: list[str] = []
    builtins, user_tools, missing = _agent_tools(agent, registry, tools)
    for name in missing:
        left_out.append(f"{where}: tool '{name}' is neither O's nor in the file")
    left_names = {c.name for c in tools.choices.values() if c.kind == "left_out"} | set(missing)
    rules = [r.model_dump() for r in agent.tool_rules or []]
    # (Checked before the system message shows them: a bad rule is the import's 422.)
    kept_rules = checked_rules([r for r in rules if r["tool_name"] not in left_names])
    if len(kept_rules) < len(rules):
        left_out.append(f"{where}: {len(rules) - len(kept_rules)} tool rules on tools left out")
    past = None if options.strip_messages else history(agent, agent_id)
    system = agent.system if agent.system is not None else default_system(agent.agent_type)
    specs = [b.spec.model_dump() for b in [*inline, *attached]]
    command = CreateAgent(
        agent_id=agent_id,
        name=_name(agent, options, where),
        system=system,
        agent_type=agent.agent_type,
        llm_config=_llm_config(agent, options, where),
        embedding_config=_embedding_config(agent, options),
        tools=builtins,
        user_tools=user_tools,
        tool_rules=kept_rules,
        metadata=agent.metadata,
        new_blocks=inline,
        block_ids=[b.block_id for b in attached],
        tags=list(agent.tags or []),
        description=agent.description,
        timezone=agent.timezone or "UTC",
        encrypted_secrets=_secrets(agent, options, where),
        idempotency_key=key,
        system_message=ChatMessage(
            id=derived_id("message", agent_id, "system"),
            role="system",
            # (Its tool rules last, as the executor compiles the prompt the model sees.)
            content=compile_system(system, agent_id, specs, past.count if past else 0)
            + ToolRuleSolver(kept_rules).prompt(),
        ),
        enable_sleeptime=sleeptime,
    )
    # Decided now, to refuse bad rules or metadata before anything is written.
    size = len(decide.create_agent(command).model_dump_json())
    if size > AGENT_EVENT_BYTES:
        raise HTTPException(
            413,
            f"{where}: its system prompt and blocks come to {size} bytes, over the limit"
            f" of {AGENT_EVENT_BYTES}",
        )
    if past is None:
        return AgentWrite(command, [], {}, left_out)
    return AgentWrite(command, past.parts, past.images, left_out + past.left_out)


def _agent_tools(
    agent: FileAgent, registry: Registry, tools: ToolsPlan
) -> tuple[list[str], list[UserTool], list[str]]:
    """Built-in tool names, user tools, and names the agent asks for that nothing gives."""
    choices: list[ToolChoice] = [tools.choices[t] for t in agent.tool_ids or []]
    by_name = {c.name: c for c in tools.choices.values()}
    missing: list[str] = []
    for name in agent.tools or []:
        if name in SCHEMAS:
            choices.append(ToolChoice("builtin", name))
        elif name in by_name:
            choices.append(by_name[name])
        elif name in registry.tools_by_name:
            choices.append(ToolChoice("user", name, registry.tools_by_name[name]["id"]))
        else:
            missing.append(name)
    builtins = list(BASE_TOOLS.get(agent.agent_type, [])) if agent.include_base_tools else []
    builtins += [c.name for c in choices if c.kind == "builtin"]
    # The file's tool rules say which tools wait for approval (its requires_approval
    # rules), so a tool's own default adds none here.
    user = {c.tool_id: UserTool(c.tool_id, c.name, False) for c in choices if c.tool_id}
    unique = list(dict.fromkeys(builtins))
    check_unique_names(unique, [t.name for t in user.values()])
    return unique, list(user.values()), missing


def _name(agent: FileAgent, options: ImportOptions, where: str) -> str:
    if options.name:
        name = options.name
    else:
        name = agent.name or "imported-agent"
        if options.append_copy_suffix:
            name += "_copy"
    try:
        return _AGENT_NAME.validate_python(name)
    except ValidationError as exc:
        raise HTTPException(422, f"{where}: the name '{name}' is not allowed: {exc}") from exc


def _llm_config(agent: FileAgent, options: ImportOptions, where: str) -> dict[str, Any]:
    if options.model:
        return _served(options.model, None, where)
    given = agent.llm_config
    if given:
        model, endpoint = given.get("model"), given.get("model_endpoint_type")
        handle = given.get("handle") or (f"{endpoint}/{model}" if model and endpoint else None)
        if not isinstance(handle, str):
            raise HTTPException(422, f"{where}: llm_config names no model (handle or model)")
        window = given.get("context_window")
        base = _served(handle, window if isinstance(window, int) else None, where)
        # The file's settings (temperature, max_tokens, reasoning ...) over O's defaults;
        # where the model is served is O's to say.
        return base | {k: v for k, v in given.items() if k not in _ENDPOINT_FIELDS}
    if agent.model:
        return _served(agent.model, None, where)
    raise HTTPException(422, f"{where}: neither llm_config nor model says which model it uses")


def _served(handle: str, window: int | None, where: str) -> dict[str, Any]:
    try:
        return llm_config_for(handle, window)
    except HTTPException as exc:
        raise HTTPException(
            400,
            f"{where}: {exc.detail}; import it with `model` set to a model this server serves",
        ) from exc


def _embedding_config(agent: FileAgent, options: ImportOptions) -> dict[str, Any] | None:
    if options.embedding:
        return embedding_config_for(options.embedding)
    if agent.embedding_config:
        return dict(agent.embedding_config)
    if agent.embedding:
        return embedding_config_for(agent.embedding)
    return None


def _secrets(agent: FileAgent, options: ImportOptions, where: str) -> dict[str, str]:
    """The agent's tool secrets: the values the import gives for the file's keys (an
    exported file holds none); a key left without a value is left out."""
    keys = {**(agent.tool_exec_environment_variables or {}), **(agent.secrets or {})}
    given = options.secrets or {}
    values = {k: given.get(k) or v for k, v in keys.items()}
    for k in values:
        if not _SECRET_NAME.match(k):
            raise HTTPException(422, f"{where}: '{k}' cannot be an environment variable's name")
    filled = {k: v for k, v in values.items() if v}
    if not filled:
        return {}
    return secrets_of(None, filled) or {}


def _group(
    group: FileGroup, import_id: str, agent_ids: dict[str, str], plan: ImportPlan
) -> GroupCreated:
    config = group.manager_config
    where = f"group {group.id}"
    manager_type = config.get("manager_type", "round_robin")
    if manager_type not in MANAGER_TYPES:
        raise HTTPException(
            422,
            f"{where}: manager type '{manager_type}' is not served by O"
            f" (one of: {', '.join(MANAGER_TYPES)})",
        )
    manager = config.get("manager_agent_id")
    if manager is None and manager_type in _NEEDS_MANAGER:
        raise HTTPException(422, f"{where}: a {manager_type} group needs a manager agent")
    numbers = {}
    for name in ("sleeptime_agent_frequency", "max_turns"):
        value = config.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise HTTPException(422, f"{where}: manager_config.{name} must be an integer")
        numbers[name] = value
    token = config.get("termination_token")
    if token is not None and not isinstance(token, str):
        raise HTTPException(422, f"{where}: manager_config.termination_token must be text")
    if group.shared_block_ids:
        plan.left_out.append(f"{where}: shared blocks are not kept (O's groups have none)")
    return GroupCreated(
        group_id=derived_id("group", import_id, group.id),
        manager_type=manager_type,
        agent_ids=[agent_ids[a] for a in group.agent_ids],
        description=group.description or "",
        manager_agent_id=agent_ids[manager] if manager is not None else None,
        termination_token=token,
        # A sleep-time group is its manager's companion, as enable_sleeptime makes one.
        managed=manager_type == "sleeptime",
        **numbers,
    )

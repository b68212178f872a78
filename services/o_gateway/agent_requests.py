"""Agent requests as typed commands: the checks and look-ups a request needs first.

What can be told from the request alone, or from rows that are not the agent's
(a tool found by name, a block's label), is checked here, in the order clients
have always seen the errors; what depends on the agent's state when the change
is decided is for o_gateway/decisions/decide.py.
"""

from __future__ import annotations

import random
from typing import Any

from fastapi import HTTPException

from o_contracts.base_tools import (
    BASE_TOOLS,
    MULTI_AGENT_TOOLS,
    SCHEMAS,
    SLEEPTIME_PRIMARY_TOOLS,
    SLEEPTIME_RULES,
)
from o_contracts.ids import derived_id
from o_contracts.models import BlockSpec, ChatMessage
from o_contracts.prompts import default_system
from o_contracts.system_prompt import compile_system
from o_contracts.tool_rules import ToolRuleSolver
from o_gateway.decisions import AgentChanges, CreateAgent, NewBlock, UpdateAgent, UserTool
from o_gateway.decisions.checks import check_unique_names, checked_metadata, checked_rules
from o_gateway.idempotency import resource_id
from o_gateway.model_settings import to_llm_config
from o_gateway.models_config import embedding_config_for, llm_config_for, llm_config_from_body
from o_gateway.schemas import CreateAgentBody, CreateBlockBody, UpdateAgentBody
from o_gateway.state import Gateway, checked_id
from o_gateway.tool_registry import BUILTIN_IDS, user_tool_by_name, user_tools
from o_runtime import provider_registry
from o_runtime.tool_secrets import SecretsUnavailable, encrypt_all

DEFAULT_DESCRIPTIONS = {
    "persona": "The persona block: Stores details about your current persona, guiding how you "
    "behave and respond. This helps you to maintain consistency and personality in your "
    "interactions.",
    "human": "The human block: Stores key details about the person you are conversing with, "
    "allowing for more personalized and friend-like conversation.",
}
_ADJ = ("bright", "calm", "eager", "gentle", "keen", "lucky", "quiet", "swift")
_NOUN = ("otter", "falcon", "maple", "comet", "harbor", "lantern", "meadow", "summit")


async def create_agent(gw: Gateway, body: CreateAgentBody, key: str | None) -> CreateAgent:
    """The CreateAgent a POST /v1/agents/ asks for; `key`: its checked Idempotency-Key."""
    if body.llm_config:
        llm_config = llm_config_from_body(body.llm_config)
    elif body.model:
        await provider_registry.ensure_handle(body.model, gw.pool)
        llm_config = llm_config_for(body.model, body.context_window_limit)
    else:
        raise HTTPException(400, "Must specify either model or llm_config")
    llm_config |= llm_settings(body)
    embedding_config = (
        embedding_config_for(body.embedding) if body.embedding else body.embedding_config
    )
    base = list(BASE_TOOLS.get(body.agent_type, [])) if body.include_base_tools else []
    if body.enable_sleeptime and body.include_base_tools and body.agent_type != "sleeptime_agent":
        # Memory is the companion's to edit (Letta's base tools for such an agent).
        base = list(SLEEPTIME_PRIMARY_TOOLS)
    if body.include_multi_agent_tools:
        base += MULTI_AGENT_TOOLS
    tools, found_tools = await resolve_tools(gw, base, body.tools, body.tool_ids)
    encrypted = secrets_of(body.tool_exec_environment_variables, body.secrets) or {}
    labels = [b.label for b in body.memory_blocks]
    if len(set(labels)) != len(labels):
        raise HTTPException(400, "memory_blocks have duplicate labels")
    specs = [block_spec(b) for b in body.memory_blocks]
    block_ids = [checked_id(b, "block") for b in body.block_ids]
    found: list[Any] = []
    if block_ids:
        found = await gw.pool.fetch(
            'SELECT id, label, value, "limit", description, read_only FROM blocks'
            " WHERE id = ANY($1)",
            block_ids,
        )
        missing = set(block_ids) - {r["id"] for r in found}
        if missing:
            raise HTTPException(404, f"Block {sorted(missing)[0]} not found")
        clash = set(labels) & {r["label"] for r in found}
        if clash:
            raise HTTPException(400, f"duplicate block label '{sorted(clash)[0]}'")
    agent_id = resource_id("agent", key)
    system = body.system if body.system is not None else default_system(body.agent_type)
    # The blocks in the order the agent will have them: the new ones, then the attached.
    by_id = {r["id"]: dict(r) for r in found}
    blocks = [s.model_dump() for s in specs] + [by_id[b] for b in block_ids]
    # (Checked before the system message shows them: a bad rule is the request's 422.)
    rules = checked_rules([r.model_dump() for r in body.tool_rules]) or default_rules(body)
    # With a key, a retry names the same blocks and commands as the first try.
    new_blocks = []
    for i, spec in enumerate(specs):
        block_id = resource_id("block", key, agent_id, str(i))
        command_id = resource_id("cmd", key, block_id) if key else None
        new_blocks.append(NewBlock(block_id=block_id, spec=spec, command_id=command_id))
    return CreateAgent(
        agent_id=agent_id,
        name=body.name or f"{random.choice(_ADJ)}-{random.choice(_NOUN)}",
        system=system,
        agent_type=body.agent_type,
        llm_config=llm_config,
        embedding_config=embedding_config,
        tools=tools,
        user_tools=found_tools,
        tool_rules=rules,
        metadata=body.metadata,
        new_blocks=new_blocks,
        block_ids=block_ids,
        tags=body.tags,
        description=body.description,
        timezone=body.timezone or "UTC",
        encrypted_secrets=encrypted,
        idempotency_key=key,
        system_message=ChatMessage(
            id=derived_id("message", agent_id, "system"),
            role="system",
            # (Its tool rules last, as the executor compiles the prompt the model sees.)
            content=compile_system(system, agent_id, blocks, 0) + ToolRuleSolver(rules).prompt(),
        ),
        initial_messages=[
            ChatMessage(
                id=derived_id("message", agent_id, "initial", str(i)),
                role=m.role,
                content=m.text(),
                name=m.name,
                otid=m.otid,
            )
            for i, m in enumerate(body.initial_message_sequence or [])
        ],
        enable_sleeptime=body.enable_sleeptime,
        concurrency=body.concurrency,
    )


async def update_agent(gw: Gateway, agent_id: str, body: UpdateAgentBody) -> UpdateAgent:
    """The UpdateAgent a PATCH /v1/agents/{agent_id} asks for (a field left out stays)."""
    if body.metadata is not None:
        checked_metadata(body.metadata)
    tool_rules = None
    if body.tool_rules is not None:
        tool_rules = checked_rules([r.model_dump() for r in body.tool_rules])
    llm_config = None
    if body.llm_config is not None:
        llm_config = llm_config_from_body(body.llm_config)
    elif body.model is not None:
        await provider_registry.ensure_handle(body.model, gw.pool)
        llm_config = llm_config_for(body.model, body.context_window_limit)
    embedding_config = body.embedding_config
    if body.embedding is not None:
        embedding_config = embedding_config_for(body.embedding)
    block_ids = None
    if body.block_ids is not None:
        block_ids = await attachable_blocks(gw, body.block_ids)
    tools = tool_ids = None
    if body.tool_ids is not None:
        # Letta's update replaces the agent's whole tool list.
        tools, found = await resolve_tools(gw, [], [], body.tool_ids)
        tool_ids = [t.id for t in found]
    changes = AgentChanges(
        name=body.name,
        system=body.system,
        tags=body.tags,
        metadata=body.metadata,
        description=body.description,
        timezone=body.timezone,
        tool_rules=tool_rules,
        llm_config=llm_config,
        embedding_config=embedding_config,
        block_ids=block_ids,
        tools=tools,
        tool_ids=tool_ids,
        encrypted_secrets=secrets_of(body.tool_exec_environment_variables, body.secrets),
        enable_sleeptime=body.enable_sleeptime,
        # (null sets the agent's default back to none: the route's policy, Letta's)
        concurrency=(
            body.concurrency
            if body.concurrency is not None or "concurrency" not in body.model_fields_set
            else ""
        ),
    )
    return UpdateAgent(agent_id=agent_id, changes=changes, llm_settings=llm_settings(body) or None)


def default_rules(body: CreateAgentBody) -> list[dict[str, Any]]:
    """A sleep-time companion's base rule: memory_finish_edits ends its turn."""
    if body.agent_type == "sleeptime_agent" and body.include_base_tools:
        return [dict(r) for r in SLEEPTIME_RULES]
    return []


def llm_settings(body: CreateAgentBody | UpdateAgentBody) -> dict[str, Any]:
    """The llm_config fields a request sets besides the model: Letta's older top-level
    fields, then model_settings, then parallel_tool_calls (Letta's order of precedence)."""
    out: dict[str, Any] = {}
    if body.max_tokens is not None:
        out["max_tokens"] = body.max_tokens
    if isinstance(body, CreateAgentBody):
        if body.max_reasoning_tokens is not None:
            out["max_reasoning_tokens"] = body.max_reasoning_tokens
        if body.enable_reasoner is not None:
            out["enable_reasoner"] = body.enable_reasoner
    if body.model_settings is not None:
        out |= to_llm_config(body.model_settings)
    if body.parallel_tool_calls is not None:
        out["parallel_tool_calls"] = body.parallel_tool_calls
    return out


async def attachable_blocks(gw: Gateway, given: list[str]) -> list[str]:
    """Block ids an agent can hold all together: they exist and their labels differ."""
    ids = [checked_id(b, "block") for b in given]
    found = await gw.pool.fetch("SELECT id, label FROM blocks WHERE id = ANY($1)", ids)
    missing = set(ids) - {r["id"] for r in found}
    if missing:
        raise HTTPException(404, f"Block {sorted(missing)[0]} not found")
    labels = [r["label"] for r in found]
    clash = sorted({label for label in labels if labels.count(label) > 1})
    if clash:
        raise HTTPException(409, f"block_ids hold two blocks labelled '{clash[0]}'")
    return list(dict.fromkeys(ids))


def block_spec(body: CreateBlockBody) -> BlockSpec:
    if len(body.value) > body.limit:
        # Letta answers a value over its block's limit as a validation error.
        raise HTTPException(
            422,
            f"block '{body.label}' value is {len(body.value)} characters, over its limit "
            f"of {body.limit}",
        )
    return BlockSpec(
        label=body.label,
        value=body.value,
        limit=body.limit,
        description=body.description or DEFAULT_DESCRIPTIONS.get(body.label),
        read_only=body.read_only,
        metadata=body.metadata or {},
        tags=body.tags or [],
    )


async def resolve_tools(
    gw: Gateway, base: list[str], names: list[str], tool_ids: list[str]
) -> tuple[list[str], list[UserTool]]:
    """Built-in tool names and user tools, from tools given by name and by id (each once)."""
    builtins = list(base)
    user_ids: list[str] = []
    missing_names: list[str] = []
    for name in names:
        if name in SCHEMAS:
            builtins.append(name)
            continue
        row = await user_tool_by_name(gw, name)
        if row is None:
            missing_names.append(name)
        else:
            user_ids.append(row["id"])
    if missing_names:
        # Letta's words (a set of the names): Letta Code reads them to recover, by
        # creating its agent without the tools this server lacks.
        listed = ", ".join(repr(n) for n in sorted(set(missing_names)))
        raise HTTPException(400, f"Tools not found by name: {{{listed}}}")
    for tool_id in tool_ids:
        checked_id(tool_id, "tool")
        if tool_id in BUILTIN_IDS:
            builtins.append(BUILTIN_IDS[tool_id])
        else:
            user_ids.append(tool_id)
    found = await user_tools(gw, user_ids)
    missing = set(user_ids) - {r["id"] for r in found}
    if missing:
        raise HTTPException(404, f"Tool {sorted(missing)[0]} not found")
    unique_builtins = list(dict.fromkeys(builtins))
    # `found` follows user_ids, repeats included: each tool once, where it first came.
    unique = list({r["id"]: UserTool.from_row(r) for r in found}.values())
    check_unique_names(unique_builtins, [t.name for t in unique])
    return unique_builtins, unique


def secrets_of(env: dict[str, str] | None, secrets: dict[str, str] | None) -> dict[str, str] | None:
    """Both Letta spellings, encrypted; None when the body set neither."""
    if env is None and secrets is None:
        return None
    try:
        return encrypt_all({**(env or {}), **(secrets or {})})
    except SecretsUnavailable as exc:
        raise HTTPException(400, str(exc)) from exc

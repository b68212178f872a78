"""What an agent's next prompt holds, section by section, with token estimates
(GET /v1/agents/{id}/context: Letta's ContextWindowOverview).

The sections are those the loop compiles (o_contracts/system_prompt.py, the tool rules'
prompt, the tools the rules allow at a turn's start), so the figures describe the
prompt the model would see, estimated offline as the loop's own budget is.
"""

from __future__ import annotations

import json

from o_contracts.models import ChatMessage
from o_contracts.requests import ContextOverview
from o_contracts.system_prompt import render_blocks, render_metadata
from o_contracts.tool_rules import ToolRuleSolver
from o_executor import llm, tokens
from o_executor.providers import Handle, UnknownProvider
from o_executor.run import policy
from o_executor.run.agent import AgentConfig
from o_executor.run.summarize import SUMMARY_PREFIX
from o_memory.core_memory import CoreMemory


def _family(agent: AgentConfig) -> str:
    try:
        return llm.family(Handle.parse(agent.model.handle))
    except UnknownProvider:
        return "openai"


def context_overview(
    agent: AgentConfig, core: CoreMemory, history: list[ChatMessage], recall_total: int
) -> ContextOverview:
    family = _family(agent)

    def count(text: str) -> int:
        return tokens.estimate_text(text, family) if text else 0

    rules = ToolRuleSolver([dict(r) for r in agent.tool_rules])
    functions = policy.tool_schemas(agent, rules.allowed(agent.available, None), {})
    core_memory = render_blocks(core["blocks"])
    external = render_metadata(
        agent.id,
        len(history),
        archival_count=core["archival_count"],
        archival_tags=core["archival_tags"],
    )
    usage_rules = rules.prompt()
    summary = next(
        (m for m in history if m.role == "user" and (m.content or "").startswith(SUMMARY_PREFIX)),
        None,
    )
    wire = llm.to_openai_messages(history)
    num_messages = tokens.estimate_request("", wire, [], family)
    sections = {
        "system": count(agent.system_prompt),
        "core": count(core_memory),
        "external": count(external),
        "rules": count(usage_rules),
        "functions": count(json.dumps(functions)) if functions else 0,
        "messages": num_messages,
    }
    return ContextOverview(
        context_window_size_max=agent.model.window,
        context_window_size_current=sum(sections.values()),
        num_messages=len(history),
        num_archival_memory=core["archival_count"],
        num_recall_memory=recall_total,
        num_tokens_external_memory_summary=sections["external"],
        external_memory_summary=external,
        num_tokens_system=sections["system"],
        system_prompt=agent.system_prompt,
        num_tokens_core_memory=sections["core"],
        core_memory=core_memory,
        num_tokens_tool_usage_rules=sections["rules"],
        tool_usage_rules=usage_rules or None,
        num_tokens_summary_memory=count(summary.content or "") if summary else 0,
        summary_memory=summary.content if summary else None,
        num_tokens_functions_definitions=sections["functions"],
        functions_definitions=functions,
        num_tokens_messages=num_messages,
        messages=history,
    )

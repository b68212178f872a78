"""A proposal drawn by the agent's own model from the digest of its recent runs (issue 14
point 2; o_evolution/performance.py): what went wrong (stop reasons, errors, tool errors,
steps, feedback, by slice), then a small patch to its current version, never a rewrite
(ACE: whole rewrites collapse context)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from o_contracts.evolution import Patch, VersionSpec
from o_contracts.models import Usage
from o_executor import llm
from o_executor.providers import Handle

INSTRUCTIONS = (
    "You improve an AI agent by proposing a small patch to its configuration, based on how"
    " its recent runs went. Propose at most a few itemised edits, never a rewrite. Reply"
    ' with one JSON object: {"rationale": "...", "ops": [...]} where each op is one of\n'
    '{"op": "replace_text", "target": "system" or "block:<label>", "old": "...", "new": "..."}\n'
    '{"op": "append_text", "target": "system" or "block:<label>", "text": "..."}\n'
    '{"op": "add_tool", "name": "..."} / {"op": "remove_tool", "name": "..."}\n'
    '{"op": "set_model_setting", "key": "temperature", "value": 0.2}'
)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


@dataclass(frozen=True)
class Drafted:
    patch: Patch | None
    usage: Usage
    # Why no patch came of it (unparseable answer).
    problem: str | None = None


def parse(text: str | None) -> Patch:
    """The JSON object in the answer, as a Patch; ValueError says what is wrong."""
    match = _OBJECT.search(text or "")
    if match is None:
        raise ValueError("the answer holds no JSON object")
    try:
        raw: Any = json.loads(match.group(0))
        return Patch.model_validate(raw)
    except (ValueError, ValidationError) as exc:
        raise ValueError(f"not a valid patch: {exc}") from exc


async def draft(model: str, current: VersionSpec, digest: str, retries: llm.Retries) -> Drafted:
    """A patch from the agent's model, given its current version and its performance
    digest (o_evolution/performance.py: what the agent's own report tool shows)."""
    shown = current.model_dump(mode="json")
    result = await llm.complete(
        Handle.parse(model),
        [
            {"role": "system", "content": INSTRUCTIONS},
            {
                "role": "user",
                "content": f"Current version:\n{json.dumps(shown, indent=1)}\n\n"
                f"How your runs went:\n{digest}",
            },
        ],
        [],
        retries=retries,
    )
    try:
        return Drafted(parse(result.content), result.usage)
    except ValueError as exc:
        return Drafted(None, result.usage, str(exc))

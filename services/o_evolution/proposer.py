"""A proposal drawn by the agent's own model from a digest of its recent runs (issue 14
point 2): what went wrong (stop reasons, errors, tool errors, steps), then a small patch
to its current version, never a rewrite (ACE: whole rewrites collapse context)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
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
class RunDigest:
    run_id: str
    stop_reason: str | None
    steps: int
    tokens: int
    error: str | None
    tool_errors: int
    # Steps its users rated negative (PATCH /v1/steps/{id}/feedback).
    negative_feedback: int = 0


@dataclass(frozen=True)
class Drafted:
    patch: Patch | None
    usage: Usage
    # Why no patch came of it (unparseable answer).
    problem: str | None = None


def digest(runs: Sequence[RunDigest]) -> str:
    lines = [
        f"- run {r.run_id}: stop {r.stop_reason}, {r.steps} steps, {r.tokens} tokens,"
        f" {r.tool_errors} tool errors"
        + (f", {r.negative_feedback} steps rated negative" if r.negative_feedback else "")
        + (f", error: {r.error}" if r.error else "")
        for r in runs
    ]
    return "\n".join(lines) or "(no runs yet)"


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


async def draft(
    model: str, current: VersionSpec, runs: Sequence[RunDigest], retries: llm.Retries
) -> Drafted:
    shown = current.model_dump(mode="json")
    result = await llm.complete(
        Handle.parse(model),
        [
            {"role": "system", "content": INSTRUCTIONS},
            {
                "role": "user",
                "content": f"Current version:\n{json.dumps(shown, indent=1)}\n\n"
                f"Recent runs:\n{digest(runs)}",
            },
        ],
        [],
        retries=retries,
    )
    try:
        return Drafted(parse(result.content), result.usage)
    except ValueError as exc:
        return Drafted(None, result.usage, str(exc))

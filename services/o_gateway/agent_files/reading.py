"""An uploaded agent file's bytes to a checked AgentFile, or a clear 4xx.

- over the size limit: 413, before it is parsed;
- not UTF-8 JSON: 400 (Letta's "Corrupted agent file format."); JSON that is a
  string holding JSON (some published files are so) is read once more;
- Letta's pre-2025 single-agent format (no `agents` list): 400, as Letta says;
- a value O could not store (NUL, lone surrogates, numbers out of range, deep
  nesting, texts over 256 KiB but images' data and
  files' contents): 422 naming where;
- fields of the wrong shape: 422 with the validation errors.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import HTTPException
from pydantic import ValidationError

from o_contracts import limits
from o_gateway.agent_files.schema import AgentFile

# Images sent as data in a message's content, and folders' files' texts, may be longer
# than a text (the file's own size limit bounds them).
_LONG_TEXTS = re.compile(
    r"file\.agents\[\d+\]\.messages\[\d+\]\.content\[\d+\]\.source\.(?:data|url)"
    r"|file\.files\[\d+\]\.content"
)
MAX_SHOWN_ERRORS = 10


def read_agent_file(data: bytes, max_bytes: int) -> AgentFile:
    if len(data) > max_bytes:
        raise HTTPException(413, f"the agent file is over the limit of {max_bytes} bytes")
    value = _json(data)
    if isinstance(value, str):
        value = _json(value.encode("utf-8"))
    if not isinstance(value, dict) or not isinstance(value.get("agents"), list):
        raise HTTPException(
            400,
            "Legacy AgentSchema format is deprecated. Please use the new AgentFileSchema"
            " format with 'agents' field.",
        )
    try:
        limits.check_storable(value, "file", long_texts=_LONG_TEXTS)
    except limits.Unstorable as exc:
        raise HTTPException(422, f"the agent file cannot be stored: {exc}") from exc
    try:
        return AgentFile.model_validate(value)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        raise HTTPException(422, _shown(errors)) from exc


def _json(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HTTPException(400, "Corrupted agent file format.") from exc


def _shown(errors: list[Any]) -> list[Any]:
    # A broken file may have thousands of bad fields: the first ones say enough.
    shown = [{**e, "loc": ["file", *e["loc"]]} for e in errors[:MAX_SHOWN_ERRORS]]
    if len(errors) > MAX_SHOWN_ERRORS:
        shown.append({"msg": f"and {len(errors) - MAX_SHOWN_ERRORS} more", "loc": ["file"]})
    return shown

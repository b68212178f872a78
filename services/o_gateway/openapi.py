"""The OpenAPI document as the gateway behaves: id formats, error shapes, every status.

FastAPI's generated document is post-processed once, generically, rather than
each route declaring the same things:

- id path parameters (`agent_id`, `block_id` ...) carry the `<prefix>-<uuid>` pattern
  that `o_contracts.ids.parse_id` enforces;
- a 422's `detail` is a string (the gateway's own checks) or FastAPI's array of
  validation errors, and so is every other error's: `{"detail": ...}` always;
- each operation lists the statuses it can answer: 401 (with a key configured),
  413/414/422 (limits on every input, see o_gateway.guards), 404 where an id is looked
  up, 400/409/504 where it changes something, 500 and 503 (with Retry-After) anywhere;
- with `O_API_KEY` set, a bearer security scheme is required everywhere but health and the
  browser's return from an MCP server's OAuth sign-in.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from o_contracts.ids import IdPrefix
from o_gateway.mcp_sign_in import CALLBACK_PATH as MCP_OAUTH_CALLBACK

# Path parameter name -> the prefix of the id it holds.
ID_PARAMETERS: dict[str, IdPrefix] = {
    "agent_id": "agent",
    "block_id": "block",
    "tool_id": "tool",
    "run_id": "run",
    "step_id": "step",
    "message_id": "message",
    "memory_id": "passage",
    "passage_id": "passage",
    "mcp_server_id": "mcp_server",
    "group_id": "group",
    "proposal_id": "proposal",
    "rollout_id": "rollout",
    # Folders keep Letta's "source-" ids (they were sources first).
    "folder_id": "source",
    "file_id": "file",
    "schedule_id": "schedule",
    "provider_id": "provider",
    "archive_id": "archive",
    "identity_id": "identity",
    "sandbox_config_id": "sandbox",
}
# A sandbox configuration's variable: Letta's "sandbox-env-<uuid>".
ENV_VAR_PATTERN_PREFIX = "sandbox-env"

_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

# Statuses particular to one operation, beyond the generic rules below.
EXTRA_STATUSES: dict[tuple[str, str], tuple[int, ...]] = {
    ("get", "/v1/agents/{agent_id}/archival-memory/search"): (504,),
    ("post", "/v1/agents/{agent_id}/summarize"): (502,),
    # Letta's older MCP routes: a server that cannot be reached is a 502, as Letta's.
    ("get", "/v1/tools/mcp/servers/{mcp_server_name}/tools"): (502,),
    ("post", "/v1/tools/mcp/servers/{mcp_server_name}/tools/{tool_name}/execute"): (502,),
    ("post", "/v1/tools/mcp/servers/test"): (502,),
    # Options Letta refuses with 400: an unknown tool type, the legacy export format.
    ("get", "/v1/tools/"): (400,),
    ("get", "/v1/tools/count"): (400,),
    ("get", "/v1/agents/{agent_id}/export"): (400,),
    # A file of a type folders do not take, as Letta answers it.
    ("post", "/v1/folders/{folder_id}/upload"): (415,),
    # Passages are embedded as they go in: an embedding provider that fails is a 502.
    ("post", "/v1/archives/{archive_id}/passages"): (502,),
    ("post", "/v1/archives/{archive_id}/passages/batch"): (502,),
    ("post", "/v1/sources/{folder_id}/upload"): (415,),
    # A provider's key refused by it (401), or a provider that does not answer (502).
    ("post", "/v1/providers/check"): (401, 502),
    ("post", "/v1/providers/{provider_id}/check"): (401, 502),
    ("patch", "/v1/providers/{provider_id}/refresh"): (401, 502),
    # A run whose model failed (502), as a completion (the stream says it in the stream).
    ("post", "/v1/chat/completions"): (502,),
    # An unknown storage_unit, as Letta refuses it.
    ("get", "/v1/embeddings/total_storage_size"): (400,),
    # Letta's answers, always: messages are never edited; O keeps no spans.
    ("patch", "/v1/agents/{agent_id}/messages/{message_id}"): (405,),
    ("get", "/v1/runs/{run_id}/trace"): (501,),
}

# Operations that answer a stream of server-sent events (with `streaming: true`, or always).
STREAMING = {
    ("post", "/v1/agents/{agent_id}/messages"),
    ("post", "/v1/agents/{agent_id}/messages/stream"),
    # An MCP server asked for its tools (mcp_probe.py).
    ("post", "/v1/tools/mcp/servers/connect"),
    ("get", "/v1/mcp-servers/connect/{mcp_server_id}"),
}

_DESCRIPTIONS = {
    400: "Bad request: the request cannot be carried out as given",
    401: "Missing or wrong API key (`Authorization: Bearer <key>`)",
    404: "Not found: an id in the path or a cursor names nothing",
    409: "Conflict with the current state (a concurrent change, a name in use ...)",
    413: "The request body, or a value in it, is over its size limit",
    414: "The query string is over its size limit",
    405: "Not allowed: Letta refuses it too (its deprecated message edit)",
    415: "The uploaded file's type is not one folders take",
    422: "Invalid input: a value fails validation or cannot be stored",
    500: "Internal error",
    501: "Not implemented here: what Letta answers without its span store (ClickHouse)",
    502: "A downstream step failed",
    503: "Postgres or NATS is unavailable right now; retry after `Retry-After` seconds",
    504: "Accepted but not answered in time; the change may still apply",
}

ERROR_DETAIL: dict[str, Any] = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"$ref": "#/components/schemas/ValidationError"}},
        {"type": "object"},
    ],
    "title": "Detail",
    "description": "What went wrong: a sentence, FastAPI's list of validation errors, or an"
    " object with a `code` (a pending approval)",
}


def id_pattern(prefix: str) -> str:
    return f"^{prefix}-{_UUID}$"


def install(app: FastAPI, *, secured: bool) -> None:
    """Make `app.openapi()` return the post-processed document (built once)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = truthful(generate(), secured=secured)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def truthful(schema: dict[str, Any], *, secured: bool) -> dict[str, Any]:
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    error = {
        "type": "object",
        "title": "ErrorResponse",
        "properties": {"detail": ERROR_DETAIL},
        "required": ["detail"],
    }
    schemas["ErrorResponse"] = error
    schemas["HTTPValidationError"] = {**error, "title": "HTTPValidationError"}
    schemas.setdefault("ValidationError", _VALIDATION_ERROR)
    if secured:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        schema["security"] = [{"bearer": []}]
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            _operation(path, method, operation, secured=secured)
    return schema


def _operation(path: str, method: str, operation: dict[str, Any], *, secured: bool) -> None:
    params = operation.get("parameters", [])
    has_path_params = False
    has_cursor = False
    for param in params:
        if param.get("in") == "path":
            has_path_params = True
            prefix = ID_PARAMETERS.get(param["name"])
            if prefix is not None:
                param["schema"]["pattern"] = id_pattern(prefix)
            elif param["name"] == "env_var_id":
                param["schema"]["pattern"] = f"^{ENV_VAR_PATTERN_PREFIX}-{_UUID}$"
            elif param["name"] == "conversation_id":
                # A conversation, or the agent's default one ("default" or the agent's id).
                param["schema"]["pattern"] = f"^(?:default|(?:conv|agent)-{_UUID})$"
        elif param.get("in") == "query" and param["name"] in ("after", "before"):
            has_cursor = True
    public = path.startswith(("/v1/health", "/v1/ready")) or path == MCP_OAUTH_CALLBACK
    statuses = {413, 414, 422, 500, 503}
    if secured and not public:
        statuses.add(401)
    if has_path_params or has_cursor:
        statuses.add(404)
    if "requestBody" in operation:
        statuses.add(400)
    if method != "get":
        statuses |= {400, 404, 409, 504}
    statuses |= set(EXTRA_STATUSES.get((method, path), ()))
    responses = operation.setdefault("responses", {})
    if (method, path) in STREAMING and "200" in responses:
        content = responses["200"].setdefault("content", {})
        content["text/event-stream"] = {"schema": _SSE_EVENT}
    for status in sorted(statuses):
        entry = responses.setdefault(str(status), {})
        entry["description"] = _DESCRIPTIONS[status]
        name = "HTTPValidationError" if status == 422 else "ErrorResponse"
        entry["content"] = {
            "application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}
        }
        if status == 503:
            entry["headers"] = {
                "Retry-After": {
                    "description": "Seconds to wait before retrying",
                    "schema": {"type": "integer"},
                }
            }
        if status == 401:
            entry["headers"] = {
                "WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}
            }
    operation["responses"] = dict(sorted(responses.items()))
    if public and secured:
        operation["security"] = []


# One server-sent event: `data` is a Letta chunk as JSON text, or `[DONE]` at the end.
_SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "title": "ServerSentEvent",
    "properties": {
        "data": {"type": "string", "description": "A Letta chunk as JSON, or `[DONE]`"},
        "event": {"type": "string", "description": "`error` before an error_message chunk"},
    },
}

_VALIDATION_ERROR: dict[str, Any] = {
    "type": "object",
    "title": "ValidationError",
    "properties": {
        "loc": {
            "type": "array",
            "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "title": "Location",
        },
        "msg": {"type": "string", "title": "Message"},
        "type": {"type": "string", "title": "Error Type"},
    },
    "required": ["loc", "msg", "type"],
}

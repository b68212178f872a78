"""Runs and steps (Letta's Run and Step resources), read from the executor's projection."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from o_contracts.agent_types import DEFAULT_AGENT_TYPE
from o_contracts.subjects import Lane
from o_gateway import render
from o_gateway.callbacks.reads import callback_fields
from o_gateway.conversation_reads import rendered_messages
from o_gateway.message_pages import message_page
from o_gateway.pagination import Listing
from o_gateway.routes.paths import route
from o_gateway.run_metrics import run_metrics, step_metrics, tools_used
from o_gateway.schemas import RetrieveStreamBody
from o_gateway.state import GW, Gateway, checked_id
from o_gateway.streaming import Numbering, stream_run, streamed

router = APIRouter()

ACTIVE = ("created", "running")


def run_json(row: dict[str, Any], callback: dict[str, Any] | None = None) -> dict[str, Any]:
    """A runs row as Letta's Run; `callback`: its delivery's fields (callbacks/reads.py)."""
    callback = callback or {}
    created, completed = row["created_at"], row["completed_at"]
    duration = int((completed - created).total_seconds() * 1e9) if completed else None
    return {
        "id": row["id"],
        "status": row["status"],
        "created_at": render.iso(created),
        "completed_at": render.iso(completed),
        "agent_id": row["agent_id"],
        "conversation_id": row.get("conversation_id"),
        "base_template_id": None,
        "background": row["background"],
        "metadata": {"run_type": "send_message", **interruption(row)},
        "request_config": row["request_config"],
        "stop_reason": row["stop_reason"],
        "callback_url": row.get("callback_url"),
        "callback_sent_at": render.iso(callback.get("callback_sent_at")),
        "callback_status_code": callback.get("callback_status_code"),
        "callback_error": callback.get("callback_error"),
        "ttft_ns": None,
        "total_duration_ns": duration,
    }


def interruption(row: dict[str, Any]) -> dict[str, Any]:
    """Who interrupted the run, if a later message did (an O extension in Letta's metadata;
    docs/conversations.md)."""
    by = row.get("interrupted_by")
    return {"interrupted_by": by, "rolled_back": bool(row.get("rolled_back"))} if by else {}


def prompt_tokens_details(row: dict[str, Any], provider: str) -> dict[str, int | None]:
    """The step's prompt cache in its provider's words, as Letta keeps them: OpenAI's
    `cached_tokens`, Anthropic's `cache_read_tokens` and `cache_creation_tokens`; empty
    where the provider did not say."""
    read, written = row.get("cached_input_tokens"), row.get("cache_write_tokens")
    if read is None and written is None:
        return {}
    anthropic = provider == "anthropic" or written is not None
    return {
        "cached_tokens": None if anthropic else read,
        "cache_read_tokens": read if anthropic else None,
        "cache_creation_tokens": written if anthropic else None,
    }


def step_json(row: dict[str, Any], run: dict[str, Any] | None) -> dict[str, Any]:
    provider, _, model = (row["model"] or "").partition("/")
    return {
        "id": row["id"],
        "origin": None,
        "organization_id": None,
        "provider_id": None,
        "run_id": row["run_id"],
        "agent_id": row["agent_id"],
        "provider_name": provider or None,
        "provider_category": "base",
        "model": model or None,
        "model_handle": row["model"],
        "model_endpoint": None,
        "context_window_limit": None,
        "completion_tokens": row["completion_tokens"],
        "prompt_tokens": row["prompt_tokens"],
        "total_tokens": row["total_tokens"],
        # (Letta's: a count only where the provider said more than none.)
        "cached_input_tokens": row.get("cached_input_tokens") or None,
        "cache_write_tokens": row.get("cache_write_tokens") or None,
        "reasoning_tokens": None,
        "completion_tokens_details": {},
        "prompt_tokens_details": prompt_tokens_details(row, provider),
        "stop_reason": row["finish_reason"],
        "tags": row["tags"],
        "tid": None,
        "trace_id": None,
        "request_id": None,
        "messages": [],
        "feedback": row["feedback"],
        "project_id": None,
        "error_type": None,
        "error_data": None,
        "status": "cancelled" if run and run["status"] == "cancelled" else "success",
        "created_at": render.iso(row["created_at"]),
    }


async def run_row(gw: Gateway, run_id: str) -> dict[str, Any]:
    row = await gw.pool.fetchrow("SELECT * FROM runs WHERE id = $1", checked_id(run_id, "run"))
    if row is None:
        raise HTTPException(404, f"Run {run_id} not found")
    return dict(row)


@route(router, "GET", "/v1/runs/")
async def list_runs(
    gw: GW,
    agent_id: str | None = None,
    agent_ids: Annotated[list[str] | None, Query()] = None,
    statuses: Annotated[list[str] | None, Query()] = None,
    background: bool | None = None,
    stop_reason: str | None = None,
    active: bool = False,
    after: str | None = None,
    before: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
    ascending: bool | None = None,
    conversation_id: str | None = None,
) -> list[dict[str, Any]]:
    # Unlike Letta's, `after` here is further along in `order` (Letta's runs list
    # reads it backwards, so paging it repeats its first page forever).
    q = Listing("runs")
    ids = [*(agent_ids or []), *([agent_id] if agent_id else [])]
    if ids:
        q.filter("agent_id = ANY({})", [checked_id(i, "agent") for i in ids])
    if active:
        statuses = list(ACTIVE)
    if statuses:
        q.filter("status = ANY({})", statuses)
    if conversation_id is not None:
        q.filter("conversation_id = {}", checked_id(conversation_id, "conv"))
    if background is not None:
        q.filter("background = {}", background)
    if stop_reason:
        q.filter("stop_reason = {}", stop_reason)
    if ascending is not None:
        order = "asc" if ascending else "desc"
    rows = await q.page(gw.pool, "run", before, after, order, limit)
    callbacks = await callback_fields(gw.pool, [r["id"] for r in rows if r["callback_url"]])
    return [run_json(dict(r), callbacks.get(r["id"])) for r in rows]


@route(router, "GET", "/v1/runs/active")
async def list_active_runs(
    gw: GW, agent_id: str | None = None, background: bool | None = None
) -> list[dict[str, Any]]:
    """Letta's deprecated list of active runs: the runs list with `active`, every one."""
    runs: list[dict[str, Any]] = await list_runs(
        gw, agent_id=agent_id, background=background, active=True, limit=1000
    )
    return runs


@route(router, "GET", "/v1/runs/{run_id}")
async def retrieve_run(run_id: str, gw: GW) -> dict[str, Any]:
    row = await run_row(gw, run_id)
    callbacks = await callback_fields(gw.pool, [row["id"]] if row["callback_url"] else [])
    return run_json(row, callbacks.get(row["id"]))


@route(router, "GET", "/v1/runs/{run_id}/messages")
async def list_run_messages(
    run_id: str,
    gw: GW,
    after: str | None = None,
    before: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Literal["asc", "desc"] = "asc",
) -> list[dict[str, Any]]:
    run = await run_row(gw, run_id)
    return await _run_page(gw, run, _RUN_MESSAGES, [run["id"]], before, after, limit, order)


async def _run_page(
    gw: Gateway,
    run: dict[str, Any],
    relation: str,
    args: list[object],
    before: str | None,
    after: str | None,
    limit: int,
    order: Literal["asc", "desc"],
) -> list[dict[str, Any]]:
    """A page of `relation`, some of a run's messages, rendered as the run's request asked
    (cursors follow the order and must name one of them)."""
    rows = await message_page(
        gw.pool,
        relation,
        args,
        before,
        after,
        limit,
        order,
        cursors_follow_order=True,
        unknown_cursor="not_found",
    )
    return await rendered_messages(
        gw,
        rows,
        await agent_type_of(gw, run["agent_id"]),
        render.AssistantView.of(run["request_config"]),
        newest_first=order == "desc",
    )


# A run's messages (cursors name one of them).
_RUN_MESSAGES = (
    "SELECT id, seq, body, created_at, run_id, step_id, conversation_id FROM messages"
    " WHERE run_id = $1"
)


async def agent_type_of(gw: Gateway, agent_id: str) -> str:
    agent = await gw.pool.fetchrow("SELECT agent_type FROM agents WHERE id = $1", agent_id)
    return str(agent["agent_type"]) if agent else DEFAULT_AGENT_TYPE


@route(router, "POST", "/v1/runs/{run_id}/stream")
async def retrieve_run_stream(run_id: str, gw: GW, body: RetrieveStreamBody | None = None) -> Any:
    """A background run's stream again, from the chunk after `starting_after`: what the
    client missed, then the live rest, read from the log (any gateway can serve it)."""
    body = body or RetrieveStreamBody()
    run = await run_row(gw, run_id)
    if not run["background"]:
        raise HTTPException(
            400, "Run was not created in background mode, so it cannot be retrieved."
        )
    # The run's first event: its RunStarted, or (queued, not started yet) its RunQueued.
    start = run["started_seq"] or run["last_seq"]
    return streamed(
        stream_run(
            gw,
            Lane(run["agent_id"], run["conversation_id"]),
            await agent_type_of(gw, run["agent_id"]),
            run["id"],
            start_seq=start,
            include_pings=body.include_pings,
            view=render.AssistantView.of(run["request_config"]),
            numbering=Numbering(starting_after=body.starting_after),
        )
    )


@route(router, "GET", "/v1/runs/{run_id}/usage")
async def retrieve_run_usage(run_id: str, gw: GW) -> dict[str, Any]:
    run = await run_row(gw, run_id)
    usage = run["usage"] or {}
    if not usage:
        # Still running: sum the steps recorded so far.
        totals = await gw.pool.fetchrow(
            "SELECT COALESCE(SUM(prompt_tokens), 0) AS p, COALESCE(SUM(completion_tokens), 0) AS c,"
            " COALESCE(SUM(total_tokens), 0) AS t FROM steps WHERE run_id = $1",
            run["id"],
        )
        assert totals is not None
        usage = {
            "prompt_tokens": totals["p"],
            "completion_tokens": totals["c"],
            "total_tokens": totals["t"],
        }
    return {
        "completion_tokens": usage.get("completion_tokens", 0),
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "total_tokens": usage.get("total_tokens", 0),
        "completion_tokens_details": None,
        "prompt_tokens_details": None,
    }


@route(router, "GET", "/v1/runs/{run_id}/metrics")
async def retrieve_metrics_for_run(run_id: str, gw: GW) -> dict[str, Any]:
    run = await run_row(gw, run_id)
    first_step_ns = await gw.pool.fetchval(
        "SELECT min(step_start_ns) FROM steps WHERE run_id = $1", run["id"]
    )
    return run_metrics(run, await tools_used(gw.pool, run["agent_id"], run["id"]), first_step_ns)


@route(router, "GET", "/v1/runs/{run_id}/steps")
async def list_run_steps(
    run_id: str,
    gw: GW,
    after: str | None = None,
    before: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Literal["asc", "desc"] = "desc",
) -> list[dict[str, Any]]:
    run = await run_row(gw, run_id)
    q = Listing("steps", key="seq")
    q.filter("run_id = {}", run["id"])
    rows = await q.page(gw.pool, "step", before, after, order, limit, unknown_cursor="not_found")
    return [step_json(dict(r), run) for r in rows]


@route(router, "GET", "/v1/steps/{step_id}")
async def retrieve_step(step_id: str, gw: GW) -> dict[str, Any]:
    return await step_view(gw, step_id)


@route(router, "GET", "/v1/steps/{step_id}/metrics")
async def retrieve_metrics_for_step(step_id: str, gw: GW) -> dict[str, Any]:
    return step_metrics(await step_row(gw, step_id))


@route(router, "GET", "/v1/steps/{step_id}/messages")
async def list_messages_for_step(
    step_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Literal["asc", "desc"] = "asc",
) -> list[dict[str, Any]]:
    """The messages a step wrote: the model's answer and its tools' results."""
    step = await step_row(gw, step_id)
    run = await run_row(gw, step["run_id"])
    args: list[object] = [step["run_id"], step["id"]]
    return await _run_page(gw, run, _STEP_MESSAGES, args, before, after, limit, order)


# (By its run too: the index on a run's messages finds them.)
_STEP_MESSAGES = (
    "SELECT id, seq, body, created_at, run_id, step_id, conversation_id FROM messages"
    " WHERE run_id = $1 AND step_id = $2"
)


async def step_view(gw: Gateway, step_id: str) -> dict[str, Any]:
    row = await step_row(gw, step_id)
    run = await gw.pool.fetchrow("SELECT status FROM runs WHERE id = $1", row["run_id"])
    return step_json(row, dict(run) if run else None)


async def step_row(gw: Gateway, step_id: str) -> dict[str, Any]:
    row = await gw.pool.fetchrow("SELECT * FROM steps WHERE id = $1", checked_id(step_id, "step"))
    if row is None:
        raise HTTPException(404, f"Step {step_id} not found")
    return dict(row)

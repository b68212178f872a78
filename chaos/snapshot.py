"""The API's whole view of the chaos agents, a full projection rebuild, and the difference.

A snapshot holds, per agent: the agent (`GET /v1/agents/{id}`), each of its blocks with every
version (`GET /v1/blocks/{id}/versions`), all its messages, all its runs and each run's steps;
per agent with evolution on, its proposals (with their cases), versions and decision history;
per folder: the folder, its files and their chunks.
Lists of resources are keyed by id (versions by number) with their order kept separately, so a
difference names the resource and field. Fields that legitimately differ between two reads are
left out: see `DROPPED`. The rebuild is `python -m o_devtools.rebuild` (`make rebuild`) on every
projection, while the system runs.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from chaos.api import get_json, paginate
from chaos.llm import TOKEN
from chaos.system import ROOT, python_path

PROJECTIONS = (
    "agents",
    "memory",
    "archival",
    "runs",
    "tools",
    "mcp_servers",
    "folders",
    "evolution",
)

# Left out of the comparison, with why. Everything else must be identical after a rebuild.
DROPPED: dict[str, str] = {}


async def snapshot(
    http: httpx.AsyncClient,
    agent_ids: list[str],
    folder_ids: list[str] | None = None,
    evolving: set[str] | frozenset[str] = frozenset(),
) -> dict[str, Any]:
    limit = asyncio.Semaphore(4)

    async def _evolution(agent_id: str) -> dict[str, Any]:
        base = f"/v1/agents/{agent_id}/evolution"
        listed = await get_json(http, f"{base}/proposals")
        proposals = [await get_json(http, f"{base}/proposals/{p['id']}") for p in listed]
        return {
            "proposals": _keyed(proposals, "id"),
            "versions": await get_json(http, f"{base}/versions"),
            "history": await get_json(http, f"{base}/history"),
            "rollouts": _keyed(await get_json(http, f"{base}/rollouts"), "rollout_id"),
        }

    async def folder(folder_id: str) -> dict[str, Any]:
        async with limit:
            files = await paginate(http, f"/v1/folders/{folder_id}/files")
            return {
                "folder": await get_json(http, f"/v1/folders/{folder_id}"),
                "files": _keyed(files, "id"),
                "chunks": _keyed(await paginate(http, f"/v1/folders/{folder_id}/passages"), "id"),
            }

    async def steps(run_id: str) -> list[dict[str, Any]]:
        async with limit:
            return await paginate(http, f"/v1/runs/{run_id}/steps")

    async def agent(agent_id: str) -> dict[str, Any]:
        async with limit:
            state = await get_json(http, f"/v1/agents/{agent_id}")
            blocks = []
            for block in state.get("blocks") or []:
                versions = await get_json(http, f"/v1/blocks/{block['id']}/versions")
                blocks.append({**block, "versions": _keyed(versions, "version")})
            messages = await paginate(http, f"/v1/agents/{agent_id}/messages", until_empty=True)
            runs = await paginate(http, "/v1/runs/", {"agent_id": agent_id})
        run_steps = await asyncio.gather(*(steps(r["id"]) for r in runs))
        state = {k: v for k, v in state.items() if k not in ("blocks", "memory")}
        evolution = await _evolution(agent_id) if agent_id in evolving else None
        return {
            "evolution": evolution,
            "agent": state,
            "blocks": _keyed(blocks, "id"),
            "messages": _keyed(messages, "id", with_type=True),
            "runs": _keyed(
                [{**r, "steps": _keyed(s, "id")} for r, s in zip(runs, run_steps, strict=True)],
                "id",
            ),
        }

    agents = await asyncio.gather(*(agent(a) for a in agent_ids))
    folder_ids = folder_ids or []
    folders = await asyncio.gather(*(folder(f) for f in folder_ids))
    view: dict[str, Any] = _drop(
        {
            "agents": dict(zip(agent_ids, agents, strict=True)),
            "folders": dict(zip(folder_ids, folders, strict=True)),
        }
    )
    return view


def run_statuses(view: dict[str, Any]) -> dict[str, str]:
    """Each run's status in a `snapshot`, by run id."""
    return {
        str(run.get("id")): str(run.get("status"))
        for agent in (view.get("agents") or {}).values()
        for run in ((agent.get("runs") or {}).get("items") or {}).values()
    }


def _keyed(items: list[dict[str, Any]], key: str, *, with_type: bool = False) -> dict[str, Any]:
    """A list as {key: item}, plus its order; a key seen twice gets `#2`, `#3`...

    Messages: one stored message may be listed as several (a reasoning and a tool call message
    share the stored message's id), so their key adds the message type.
    """
    out: dict[str, Any] = {}
    for item in items:
        base = str(item.get(key))
        if with_type:
            base += f"/{item.get('message_type')}"
        name, n = base, 1
        while name in out:
            n += 1
            name = f"{base}#{n}"
        out[name] = item
    return {"order": list(out), "items": out}


def _drop(value: Any, field: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _drop(v, k) for k, v in value.items() if k not in DROPPED}
    if isinstance(value, list):
        return [_drop(v, field) for v in value]
    return value


@dataclass
class Difference:
    path: str
    before: Any
    after: Any

    def describe(self, width: int = 160) -> str:
        a, b = self.before, self.after
        if isinstance(a, str) and isinstance(b, str) and len(a) + len(b) > width:
            # Long texts (a block's value): where they part, and which tokens differ.
            i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
            i = min(len(a), len(b)) if i is None else i
            start = max(0, i - 20)
            text = (
                f"{self.path}: differ from char {i} (lengths {len(a)} -> {len(b)}):"
                f" ...{a[start : i + 40]!r} -> ...{b[start : i + 40]!r}"
            )
            gone, new = set(TOKEN.findall(a)) - set(TOKEN.findall(b)), set(TOKEN.findall(b))
            new -= set(TOKEN.findall(a))
            if gone or new:
                text += (
                    f"; tokens only before: {sorted(gone) or '-'}, only after: {sorted(new) or '-'}"
                )
            return text
        if isinstance(a, list) and isinstance(b, list):
            only_a = [x for x in a if x not in b]
            only_b = [x for x in b if x not in a]
            if only_a or only_b:
                return (
                    f"{self.path}: only before {_short(only_a, width // 2)},"
                    f" only after {_short(only_b, width // 2)}"
                )
            i = next(k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
            return f"{self.path}: the same {len(a)} items, in another order from position {i}"
        return f"{self.path}: {_short(a, width // 2)} -> {_short(b, width // 2)}"

    @property
    def kind(self) -> str:
        """The path with ids and numbers as `*`: differences of one kind, counted together."""
        parts = self.path.split(".")
        return ".".join("*" if _is_key(p) else p for p in parts)


_MISSING = "<absent>"


def _is_key(part: str) -> bool:
    return part.isdigit() or part.split("/")[0].split("#")[0].count("-") >= 4


def _short(value: Any, width: int) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def diff(before: Any, after: Any, path: str = "") -> list[Difference]:
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[Difference] = []
        for key in list(before) + [k for k in after if k not in before]:
            where = f"{path}.{key}" if path else str(key)
            if key not in after:
                out.append(Difference(where, before[key], _MISSING))
            elif key not in before:
                out.append(Difference(where, _MISSING, after[key]))
            else:
                out += diff(before[key], after[key], where)
        return out
    if before != after:
        return [Difference(path, before, after)]
    return []


@dataclass
class Rebuild:
    code: int
    output: str
    seconds: float


async def rebuild(base: Path, code: Path = ROOT, timeout: float = 600.0) -> Rebuild:
    """`python -m o_devtools.rebuild` (from the code under test) on every projection, against
    the system in `base`."""
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "o_devtools.rebuild",
        *PROJECTIONS,
        cwd=str(code),
        env={**os.environ, "PYTHONPATH": python_path(code), "O_DATA_DIR": str(base)}
        | {"NATS_URL": "", "DATABASE_URL": ""},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
        return Rebuild(-1, out.decode(errors="replace") + "\n(timed out)", timeout)
    assert proc.returncode is not None
    return Rebuild(proc.returncode, out.decode(errors="replace"), time.monotonic() - start)

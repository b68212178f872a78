"""One chaos run: start the system, load it while killing its processes, check, rebuild, stop."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import nats

from chaos import evolution_checks as evolution
from chaos.api import ReadFailed, get_json
from chaos.blocklog import read_block_logs
from chaos.checks import (
    Imported,
    Verdicts,
    after_rebuild,
    evaluate,
    read_all,
    read_folders,
    read_imported,
    read_imports,
    wait_processed,
    wait_quiet,
)
from chaos.killer import TARGETS, Kill, Killer, RestartMode
from chaos.llm import ARCHIVAL_TOOL, ECHO_SOURCE
from chaos.load import IMPORT_PREFIX, Clock, Load, LoadSettings, Request, Shares
from chaos.snapshot import (
    DROPPED,
    Difference,
    Rebuild,
    diff,
    rebuild,
    run_statuses,
    snapshot,
)
from chaos.system import ROOT, System, code_version, start_llm, stop_llm
from o_contracts import subjects
from o_runtime.nats_identity import Identity

AGENT_TYPE = "letta_v1_agent"  # gets memory_insert; its text answer ends the turn
MODEL = "openai/chaos-scripted"


@dataclass
class Params:
    seed: int = 1
    duration: float = 420.0
    agents: int = 12
    # Of which evolve in mode auto (canaries, promotions: chaos/evolution_checks.py).
    auto_agents: int = 2
    clients: int = 16
    kill_interval: float = 10.0
    targets: list[str] = field(default_factory=lambda: list(TARGETS))
    shares: Shares = field(default_factory=Shares)
    request_timeout: float = 60.0
    retry_grace: float = 60.0
    recovery_timeout: float = 90.0
    server_grace: float = 10.0
    restart: RestartMode = "auto"
    quiet_timeout: float = 120.0
    env: dict[str, str] = field(default_factory=dict)
    base: Path | None = None
    keep: bool = False
    do_rebuild: bool = True
    json_path: Path | None = None
    code: Path = ROOT  # the checkout whose services run (another one: before/after a fix)


@dataclass
class Report:
    params: Params
    base: Path
    startup_seconds: float = 0.0
    code: str = ""  # which code ran (commit, uncommitted changes)
    agent_ids: list[str] = field(default_factory=list)
    folders: dict[str, str] = field(default_factory=dict)  # agent id -> its folder's id
    template: Imported | None = None  # the agent the imports' file was exported from
    imported_ids: list[str] = field(default_factory=list)  # the agents imports made
    # What became of the proposals (by status), their cases and the decisions' notes.
    proposals: Counter[str] = field(default_factory=Counter)
    requests: list[Request] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    successes: list[float] = field(default_factory=list)
    load_ended_at: float = 0.0
    wall_t0: float = 0.0  # the wall clock when the load's clock started
    kills: list[Kill] = field(default_factory=list)
    supervisor_restarts: dict[str, bool | None] = field(default_factory=dict)
    quiet_seconds: float = 0.0
    still_active: int = 0
    verdicts: Verdicts | None = None
    llm_stats: dict[str, int] = field(default_factory=dict)
    rebuild: Rebuild | None = None
    differences: list[Difference] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the harness could not do something
    notes: list[str] = field(default_factory=list)  # worth knowing, not a failure

    @property
    def acked(self) -> list[Request]:
        return [r for r in self.requests if r.acked]

    @property
    def failures(self) -> dict[str, int]:
        v = self.verdicts
        rebuild_failed = self.rebuild is not None and self.rebuild.code != 0
        return {
            "lost": len(v.lost) if v else 0,
            "duplicated": len(v.duplicated) if v else 0,
            "stuck": len(v.stuck) if v else 0,
            "version problems": len(v.versions) if v else 0,
            "rebuild differences": len(self.differences) + int(rebuild_failed),
            "harness errors": len(self.errors),
        }

    @property
    def ok(self) -> bool:
        return self.verdicts is not None and not any(self.failures.values())


async def _create_agents(http: httpx.AsyncClient, names: list[str], tool: str) -> list[str]:
    """Agents of these names with the users' tool `tool` (the `compute` requests call it)."""
    ids = []
    for name in names:
        body = {
            "name": name,
            "agent_type": AGENT_TYPE,
            "model": MODEL,
            "memory_blocks": [
                {"label": "human", "value": "chaos tokens:", "limit": 100000},
                {"label": "persona", "value": "I answer briefly."},
            ],
            "tool_ids": [tool],
            # (The `archive` requests' tool: letta_v1_agent's base tools leave it out.)
            "tools": [ARCHIVAL_TOOL],
        }
        ids.append(await _created(http, "/v1/agents/", body))
    return ids


async def _template(http: httpx.AsyncClient, tool: str) -> tuple[Imported, str]:
    """The agent the imports' file is exported from, with a short history, and its file."""
    (agent_id,) = await _create_agents(http, ["chaos-template"], tool)
    # (Before the kills: no retries needed.)
    body = {"messages": [{"role": "user", "content": "hello template"}]}
    sent = await http.post(f"/v1/agents/{agent_id}/messages", json=body, timeout=60)
    sent.raise_for_status()
    exported = await http.get(f"/v1/agents/{agent_id}/export", timeout=30)
    exported.raise_for_status()
    agent = await get_json(http, f"/v1/agents/{agent_id}")
    return await read_imported(http, agent), exported.text


async def _create_folders(http: httpx.AsyncClient, agent_ids: list[str]) -> dict[str, str]:
    """A folder for each agent, attached to it (the `upload` requests' destination)."""
    folders = {}
    for i, agent_id in enumerate(agent_ids):
        folder = await _created(http, "/v1/folders/", {"name": f"chaos-files-{i:02d}"})
        await _created(http, f"/v1/agents/{agent_id}/folders/attach/{folder}", None, "PATCH")
        folders[agent_id] = folder
    return folders


async def _created(
    http: httpx.AsyncClient, path: str, body: dict[str, Any] | None, method: str = "POST"
) -> str:
    """The id of what a POST (or PATCH) to `path` made (a 5xx or no answer is tried again)."""
    for attempt in range(10):
        try:
            response = await http.request(method, path, json=body, timeout=30)
        except httpx.HTTPError:
            response = None
        if response is not None and response.status_code == 200:
            made: str = response.json()["id"]
            return made
        if response is not None and response.status_code < 500:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
        await asyncio.sleep(0.5 * (attempt + 1))
    raise RuntimeError(f"{method} {path} failed ten times")


async def _commands_pending(system: System, consumer: str) -> int:
    """Commands the consumer has not finished: not yet delivered, or in hand (a deferred
    one included); 1 if NATS cannot say now."""
    operator = Identity.of("operator", system.endpoints)
    try:
        nc = await nats.connect(
            system.nats_url, connect_timeout=5, max_reconnect_attempts=1, **operator.options()
        )
    except Exception:
        return 1
    try:
        info = await nc.jetstream().consumer_info(subjects.COMMANDS_STREAM, consumer)
        return int(info.num_pending or 0) + int(info.num_ack_pending or 0)
    except Exception:
        return 1
    finally:
        await nc.close()


async def _llm_stats(llm_url: str) -> dict[str, int]:
    async with httpx.AsyncClient() as http:
        response = await http.get(llm_url.removesuffix("/v1") + "/stats", timeout=10)
        stats: dict[str, int] = response.json()
        return stats


async def run(params: Params, progress: Any = None) -> Report:
    """The whole run; `progress(text)` is told what happens (print, or a logger)."""

    def say(text: str) -> None:
        if progress is not None:
            progress(text)

    base = params.base or Path(tempfile.mkdtemp(prefix="o-chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    report = Report(params, base, code=code_version(params.code))
    llm_proc, llm_url = await start_llm(base)
    system = System(base, llm_url, params.env, params.code)
    try:
        say(f"starting O in {base} (supervisor log: {system.log_path})")
        started = time.monotonic()
        await system.start()
        report.startup_seconds = time.monotonic() - started
        limits = httpx.Limits(max_connections=params.clients + 8, max_keepalive_connections=64)
        async with httpx.AsyncClient(
            base_url=system.base_url, headers=system.headers, limits=limits, timeout=60
        ) as http:
            names = [f"chaos-{i:02d}" for i in range(params.agents)]
            body = {"source_code": ECHO_SOURCE, "idempotent": True}
            tool = await _created(http, "/v1/tools/", body)
            report.agent_ids = await _create_agents(http, names, tool)
            template_file = None
            if params.shares.import_ > 0:
                report.template, template_file = await _template(http, tool)
            if params.shares.propose > 0:
                for i, agent_id in enumerate(report.agent_ids):
                    path = f"/v1/agents/{agent_id}/evolution/config"
                    config = evolution.AUTO_CONFIG if i < params.auto_agents else evolution.CONFIG
                    (await http.put(path, json=config, timeout=30)).raise_for_status()
            if params.shares.upload > 0:
                report.folders = await _create_folders(http, report.agent_ids)
            say(
                f"O up in {report.startup_seconds:.1f}s at {system.base_url};"
                f" {params.agents} agents; load for {params.duration:.0f}s"
            )
            await _load_and_kill(params, report, system, http, template_file)
            say(f"load over: {len(report.requests)} requests; waiting for the runs to finish")
            active, report.quiet_seconds = await wait_quiet(http, timeout=params.quiet_timeout)
            report.still_active = len(active)
            folder_ids = list(report.folders.values())
            folders, waited = await wait_processed(http, folder_ids, params.quiet_timeout)
            report.quiet_seconds += waited
            evolved: dict[str, evolution.EvolutionView] = {}
            if params.shares.propose > 0:
                evolved, waited = await evolution.wait_decided(
                    http,
                    report.agent_ids,
                    lambda: _commands_pending(system, "evolution"),
                    params.quiet_timeout,
                )
                report.quiet_seconds += waited
                for view in evolved.values():
                    report.proposals.update(str(p.get("status")) for p in view.proposals)
                    report.proposals["(cases)"] += sum(len(p["cases"]) for p in view.proposals)
                    report.proposals["(notes)"] += view.notes
                    for rollout in view.rollouts:
                        report.proposals[f"(canaries {rollout['status']})"] += 1
                        kinds = [d["type"] for d in rollout.get("decisions") or []]
                        report.proposals["(canary advances)"] += kinds.count("RolloutAdvanced")
            imports = {}
            if report.template is not None:
                imports = await read_imports(http, IMPORT_PREFIX)
                report.imported_ids = [a.agent_id for made in imports.values() for a in made]
            try:
                report.llm_stats = await _llm_stats(llm_url)
            except (httpx.HTTPError, ValueError) as exc:
                report.errors.append(f"reading the LLM's statistics: {exc}")
            say("checking every request")
            try:
                views = await read_all(http, report.agent_ids)
                logs = None
                try:
                    block_ids = [str(v.block["id"]) for v in views.values()]
                    logs = await read_block_logs(
                        system.nats_url, block_ids, Identity.of("operator", system.endpoints)
                    )
                except Exception as exc:  # a diagnosis only: the checks go on without it
                    report.notes.append(f"could not read the blocks' log: {exc!r}")
                report.verdicts = evaluate(
                    report.requests,
                    views,
                    report.llm_stats,
                    report.wall_t0,
                    logs,
                    folders,
                    imports,
                    report.template,
                    evolved,
                )
            except ReadFailed as exc:
                report.errors.append(f"reading the API's view: {exc}")
            if params.do_rebuild:
                await _rebuild_and_compare(report, http, say)
    finally:
        say("stopping O")
        await system.stop()
        await stop_llm(llm_proc)
    if params.json_path is not None:
        write_json(report, params.json_path)
    if report.ok and not params.keep and params.base is None:
        shutil.rmtree(base, ignore_errors=True)
    return report


async def _load_and_kill(
    params: Params,
    report: Report,
    system: System,
    http: httpx.AsyncClient,
    template_file: str | None,
) -> None:
    clock = Clock()
    report.wall_t0 = time.time()
    settings = LoadSettings(
        seed=params.seed,
        duration=params.duration,
        clients=params.clients,
        shares=params.shares,
        request_timeout=params.request_timeout,
        retry_grace=params.retry_grace,
    )
    conversations = {
        a: await _created(http, f"/v1/conversations/?agent_id={a}", {}) for a in report.agent_ids
    }
    load = Load(
        http,
        report.agent_ids,
        settings,
        clock,
        conversations,
        report.folders,
        template_file,
        evolving=params.shares.propose > 0,
        rolling_back=frozenset(report.agent_ids[: params.auto_agents]),
    )
    killer = Killer(
        system,
        load,
        http,
        clock,
        seed=params.seed,
        targets=params.targets,
        interval=params.kill_interval,
        recovery_timeout=params.recovery_timeout,
        server_grace=params.server_grace,
        restart=params.restart,
    )
    try:
        await asyncio.gather(load.run(), killer.run(until=params.duration))
    finally:
        report.requests = load.requests
        report.statuses = load.statuses
        report.successes = load.successes
        report.load_ended_at = load.ended_at or clock()
        report.kills = killer.kills
        report.supervisor_restarts = dict(killer.supervisor_restarts)


async def _rebuild_and_compare(report: Report, http: httpx.AsyncClient, say: Any) -> None:
    folder_ids = list(report.folders.values())
    agent_ids = report.agent_ids + report.imported_ids
    evolving = set(report.agent_ids) if report.params.shares.propose > 0 else set()
    try:
        before = await snapshot(http, agent_ids, folder_ids, evolving)
    except ReadFailed as exc:
        report.errors.append(f"snapshot before the rebuild: {exc}")
        return
    say("rebuilding every projection from the log")
    report.rebuild = await rebuild(report.base, report.params.code)
    if report.rebuild.code != 0:
        return
    try:
        after = await snapshot(http, agent_ids, folder_ids, evolving)
    except ReadFailed as exc:
        report.errors.append(f"snapshot after the rebuild: {exc}")
        return
    report.differences = diff(before, after)
    if report.verdicts is not None:
        try:
            after_rebuild(
                report.verdicts,
                await read_all(http, report.agent_ids),
                await read_folders(http, folder_ids),
                run_statuses(before),
            )
        except ReadFailed as exc:
            report.notes.append(f"could not read the API after the rebuild: {exc}")


def write_json(report: Report, path: Path) -> None:
    """Everything, for a closer look: every request with its attempts, every kill, findings."""
    v = report.verdicts
    data = {
        "params": {k: str(val) for k, val in asdict(report.params).items()},
        "base": str(report.base),
        "agents": report.agent_ids,
        "folders": report.folders,
        "statuses": dict(report.statuses),
        "requests": [asdict(r) for r in report.requests],
        "kills": [asdict(k) for k in report.kills],
        "findings": {
            name: [
                {"text": f.text, "cause": f.cause, "details": f.details, "window": f.window}
                for f in getattr(v, name)
            ]
            for name in ("lost", "duplicated", "partial", "stuck", "versions")
        }
        if v
        else {},
        "rebuild": asdict(report.rebuild) if report.rebuild else None,
        "differences": [d.describe(400) for d in report.differences],
        "dropped_fields": DROPPED,
        "errors": report.errors,
        "notes": report.notes,
        "failures": report.failures,
    }
    path.write_text(json.dumps(data, indent=1, default=str))

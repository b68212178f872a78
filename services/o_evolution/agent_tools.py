"""Evolution in the agent's own hands (issue 20): its evolution tools, carried out here.

The executor sends a RunEvolutionTool for each call (o_executor/live/tools.py), on the
subject of the agent the call concerns. The tools reach only what any proposal reaches:
a report and a status to read, a proposal that enters the same pipeline as every other
(refused before any spending when it touches protected fields; evaluated, gated,
approved and rolled out like the rest; never applied directly), and a rollback to a
version once served. Nothing here reads or changes the judge, the rubric, the gate's
thresholds, budgets or the configuration, and no tool approves anything.

Every call is recorded (EvolutionToolCalled, hash-chained with the agent's other
decisions) with what it was answered; a call delivered again is answered from that
record. A proposal's and a rollback's own ids derive from the call, so a crash between
the effect and its record does the effect once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from o_contracts.base import Reply
from o_contracts.envelope import Envelope
from o_contracts.events import EvolutionToolCalled
from o_contracts.evolution import EvolutionConfig, Patch
from o_contracts.evolution_commands import ProposeChange, RollBackVersion, RunEvolutionTool
from o_contracts.ids import derived_id
from o_contracts.requests import first_error
from o_evolution import performance
from o_evolution.commands import PRODUCER, SPENT_TODAY, EvolutionCommands
from o_runtime.commands import Delivery
from o_runtime.eventlog import AppendRejected

_RECORDED = (
    "SELECT payload FROM evolution_history WHERE agent_id = $1"
    " AND type = 'EvolutionToolCalled' AND payload->>'run_id' = $2"
    " AND payload->>'tool_call_id' = $3"
)
_COMPANION = (
    "SELECT 1 FROM groups WHERE manager_agent_id = $1 AND manager_type = 'sleeptime'"
    " AND $2 = ANY(agent_ids)"
)
# Versions the agent served at some point: promoted or rolled back to, or served before.
_SERVED = (
    "SELECT payload->>'version_id' AS v FROM evolution_history WHERE agent_id = $1"
    " AND type IN ('VersionPromoted', 'VersionRolledBack')"
    " UNION SELECT payload->>'previous_version' FROM evolution_history WHERE agent_id = $1"
    " AND type IN ('VersionPromoted', 'VersionRolledBack')"
)
_PROPOSED_TODAY = (
    "SELECT count(*) FROM evolution_proposals WHERE agent_id = $1 AND source = 'agent'"
    " AND created_at > now() - interval '1 day'"
)
MAX_REPORT_RUNS = 200


class ToolRefused(Exception):
    """A call the tool answers with an error, recorded like any other."""


@dataclass
class AgentTools:
    commands: EvolutionCommands

    async def run(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: RunEvolutionTool = env.data
        pool = self.commands.s.pool
        known = await pool.fetchval(_RECORDED, cmd.agent_id, cmd.run_id, cmd.tool_call_id)
        if known is not None:
            return _answer(bool(known["ok"]), str(known["result"]))
        try:
            ok, text = True, await self._carry_out(env, cmd)
        except (ToolRefused, AppendRejected) as exc:
            ok, text = False, str(exc)
        await self.commands.record(
            env,
            EvolutionToolCalled(
                agent_id=cmd.agent_id,
                caller_agent_id=cmd.caller_agent_id,
                run_id=cmd.run_id,
                tool_call_id=cmd.tool_call_id,
                tool_name=cmd.tool_name,
                arguments=cmd.arguments,
                ok=ok,
                result=text,
            ),
            "tool-called",
            event_id=derived_id("evt", cmd.run_id, cmd.tool_call_id, "evolution-tool"),
        )
        return _answer(ok, text)

    async def _carry_out(self, env: Envelope[Any], cmd: RunEvolutionTool) -> str:
        config = await self._allowed(cmd)
        args = cmd.arguments
        if cmd.tool_name == "evolution_performance_report":
            return await self._report(cmd.agent_id, args)
        if cmd.tool_name == "evolution_status":
            return await self._status(cmd.agent_id, config)
        if cmd.tool_name == "evolution_propose_change":
            return await self._propose(env, cmd, config)
        if cmd.tool_name == "evolution_rollback":
            return await self._roll_back(env, cmd, config)
        raise ToolRefused(f"'{cmd.tool_name}' is not an evolution tool")

    async def _allowed(self, cmd: RunEvolutionTool) -> EvolutionConfig:
        """The agent's configuration, if evolution is on and this caller may act on it."""
        c = self.commands
        config = await c.config(cmd.agent_id)
        if not (c.settings.enabled and config.enabled):
            raise ToolRefused(
                f"evolution is off for agent {cmd.agent_id}: its evolution tools do nothing"
            )
        if cmd.caller_agent_id == cmd.agent_id:
            if not config.tools_for_agent:
                raise ToolRefused(
                    "the operator has not given this agent its evolution tools (tools_for_agent)"
                )
            return config
        if await c.s.pool.fetchval(_COMPANION, cmd.agent_id, cmd.caller_agent_id) is None:
            raise ToolRefused(
                f"agent {cmd.caller_agent_id} is not agent {cmd.agent_id}'s sleep-time companion"
            )
        return config

    async def _report(self, agent_id: str, args: dict[str, Any]) -> str:
        try:
            n = min(max(int(args.get("runs", performance.DEFAULT_RUNS)), 1), MAX_REPORT_RUNS)
        except (TypeError, ValueError):
            raise ToolRefused(f"runs must be a whole number, not {args.get('runs')!r}") from None
        pool = self.commands.s.pool
        runs = await performance.read_runs(pool, agent_id, n)
        return performance.report(runs, await performance.read_proposals(pool, agent_id))

    async def _status(self, agent_id: str, config: EvolutionConfig) -> str:
        c = self.commands
        pool = c.s.pool
        serving = await c._serving(agent_id, config)
        lines = [f"Serving version {serving} (evolution mode {config.mode})."]
        evaluating = await pool.fetchrow(
            "SELECT p.id, (SELECT count(*) FROM evolution_cases e WHERE e.proposal_id = p.id)"
            " AS cases FROM evolution_proposals p WHERE p.agent_id = $1"
            " AND p.status = 'evaluating'",
            agent_id,
        )
        if evaluating is not None:
            lines.append(
                f"Evaluating proposal {evaluating['id']} in the shadow:"
                f" {evaluating['cases']} of at most {config.cases_per_evaluation} cases so far."
            )
        canary = await c.live_canary(agent_id)
        if canary is not None:
            lines.append(
                f"Canary of proposal {canary['proposal_id']} ({canary['status']}): the candidate"
                f" {canary['version_id']} takes {canary['weight']:g}% of conversations"
                f" (steps {list(canary['steps'])})."
            )
        if evaluating is None and canary is None:
            lines.append("No experiment in progress.")
        decisions = await pool.fetch(
            "SELECT type, payload FROM evolution_history WHERE agent_id = $1"
            " AND type NOT IN ('CaseEvaluated', 'EvolutionToolCalled', 'EvaluationStarted')"
            " ORDER BY seq DESC LIMIT 5",
            agent_id,
        )
        if decisions:
            lines.append("Last decisions (newest first):")
            lines += [f"- {d['type']}{_about(d['payload'])}" for d in decisions]
        spent = int(await pool.fetchval(SPENT_TODAY, agent_id))
        proposed = int(await pool.fetchval(_PROPOSED_TODAY, agent_id))
        lines.append(
            f"Budget: {max(config.tokens_per_day - spent, 0)} of {config.tokens_per_day} tokens"
            f" left today; {max(config.agent_proposals_per_day - proposed, 0)} of"
            f" {config.agent_proposals_per_day} proposals of your own left today."
        )
        return "\n".join(lines)

    async def _propose(
        self, env: Envelope[Any], cmd: RunEvolutionTool, config: EvolutionConfig
    ) -> str:
        args = cmd.arguments
        try:
            patch = Patch.model_validate(
                {"ops": args.get("ops"), "rationale": args.get("rationale") or ""}
            )
        except ValidationError as exc:
            raise ToolRefused(f"malformed patch: {first_error(exc)}") from None
        proposal_id = derived_id("proposal", cmd.run_id, cmd.tool_call_id)
        already = await self.commands.s.pool.fetchval(
            "SELECT 1 FROM evolution_proposals WHERE id = $1", proposal_id
        )
        proposed = int(await self.commands.s.pool.fetchval(_PROPOSED_TODAY, cmd.agent_id))
        if already is None and proposed >= config.agent_proposals_per_day:
            raise ToolRefused(
                f"{proposed} proposals of your own today already: at most"
                f" {config.agent_proposals_per_day} a day (agent_proposals_per_day)"
            )
        propose = env.caused(
            ProposeChange(
                agent_id=cmd.agent_id, proposal_id=proposal_id, source="agent", patch=patch
            ),
            aggregate_id=cmd.agent_id,
            producer=PRODUCER,
            id=derived_id("cmd", cmd.run_id, cmd.tool_call_id, "propose"),
        )
        reply = await self.commands.propose(propose, _INLINE)
        if not reply.ok:
            raise ToolRefused(reply.error or "proposal refused")
        follows = (
            "it is evaluated in the shadow now"
            if config.mode != "propose_only"
            else "it waits for an operator (mode propose_only)"
        )
        return (
            f"Proposal {proposal_id} recorded; {follows}. It is served only if the gate"
            " (and, as configured, a person) accepts it: see evolution_status."
        )

    async def _roll_back(
        self, env: Envelope[Any], cmd: RunEvolutionTool, config: EvolutionConfig
    ) -> str:
        version = str(cmd.arguments.get("version_id") or "")
        reason = str(cmd.arguments.get("reason") or "")
        if config.agent_rollback_needs_approval:
            raise ToolRefused(
                "rollbacks need an operator here (agent_rollback_needs_approval): ask one"
            )
        pool = self.commands.s.pool
        known = await pool.fetchval(
            "SELECT 1 FROM agent_versions WHERE agent_id = $1 AND version_id = $2",
            cmd.agent_id,
            version,
        )
        if known is None:
            raise ToolRefused(f"unknown version {version!r}")
        served = {r["v"] for r in await pool.fetch(_SERVED, cmd.agent_id)}
        if version not in served:
            raise ToolRefused(
                f"version {version} was never served: only a version once promoted (or served"
                " before a promotion) can be rolled back to"
            )
        back = env.caused(
            RollBackVersion(
                agent_id=cmd.agent_id,
                version_id=version,
                requested_by="agent",
                reason=reason[:2000],
            ),
            aggregate_id=cmd.agent_id,
            producer=PRODUCER,
            id=derived_id("cmd", cmd.run_id, cmd.tool_call_id, "rollback"),
        )
        reply = await self.commands.roll_back(back, _INLINE)
        if not reply.ok:
            raise ToolRefused(reply.error or "rollback refused")
        return f"Rolled back: version {version} is served from the next request on."


# The proposal and rollback a tool call makes are carried out within its own delivery.
_INLINE = Delivery(stream_seq=0, num_delivered=1)


def _about(payload: dict[str, Any]) -> str:
    for key in ("proposal_id", "version_id", "rollout_id"):
        if payload.get(key):
            reason = payload.get("reason") or (payload.get("report") or {}).get("reason")
            return f" {payload[key]}" + (f": {reason}" if reason else "")
    return ""


def _answer(ok: bool, text: str) -> Reply:
    if ok:
        return Reply(ok=True, result={"text": text})
    return Reply(ok=False, status=409, error=text)

"""The evolution service's commands (o_contracts/evolution_commands.py): each decides on
the agent's evolution state as its projection has it, and appends the decision to the
agent's hash-chained evolution subject (o_evolution/history.py).

Spending comes last: a patch is checked against the protected fields and limits before
any model is asked, and an evaluation records each case as soon as it is done, so one
resumed after a crash never asks a recorded case's model calls again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from weakref import WeakValueDictionary

import asyncpg
from pydantic import TypeAdapter

from o_contracts import subjects
from o_contracts.base import Command, Reply
from o_contracts.commands import EditBlockText
from o_contracts.envelope import Envelope
from o_contracts.events import (
    AgentUpdated,
    ChangeProposed,
    EvolutionBudgetExhausted,
    ProposalApproved,
    ProposalRefused,
    ProposalRejected,
    RolloutAborted,
    VersionPromoted,
    VersionRolledBack,
)
from o_contracts.events.evolution import EvolutionConfigured, EvolutionDecided
from o_contracts.evolution import EvolutionConfig, Patch, VersionSpec
from o_contracts.evolution_commands import (
    ConfigureEvolution,
    EvaluateProposal,
    PromoteProposal,
    ProposeChange,
    ReviewProposal,
    RollBackVersion,
    StartRollout,
)
from o_contracts.ids import derived_id
from o_contracts.projection_names import AGENTS, EVOLUTION
from o_contracts.text_edits import TextEdit, block_edits
from o_evolution import history, performance, proposer
from o_evolution.agent_state import AgentNow, agent_changes, agent_now
from o_evolution.patches import PatchRefused, apply_patch
from o_evolution.rebase import Change, Step, made_on, merged_fields
from o_evolution.settings import EvolutionSettings
from o_runtime.commands import Delivery, send_and_wait
from o_runtime.eventlog import AppendRejected
from o_runtime.service import Service

log = logging.getLogger(__name__)
PRODUCER = history.PRODUCER
BLOCK_TIMEOUT = 30.0

# What the agent's evolution spent in the last 24 hours: drafting proposals, and the
# shadow cases (both arms and the judge).
SPENT_TODAY = (
    "SELECT coalesce((SELECT sum(draft_tokens) FROM evolution_proposals WHERE agent_id = $1"
    "  AND created_at > now() - interval '1 day'), 0)"
    " + coalesce((SELECT sum(tokens) FROM evolution_cases WHERE agent_id = $1"
    "  AND created_at > now() - interval '1 day'), 0)"
)
# Recent runs a proposal is drafted from.
DIGEST_RUNS = performance.DEFAULT_RUNS
# A rollback's recorded block edits (VersionRolledBack.made, .taken_back), read back.
_BLOCK_EDITS = TypeAdapter(dict[str, list[TextEdit]])
_KNOWN_EDITS = TypeAdapter(dict[str, list[TextEdit] | None])


@dataclass
class EvolutionCommands:
    s: Service
    settings: EvolutionSettings
    # One change to the version served at a time per agent (a promotion, a rollback): each
    # is computed from the history as it is and made by edits that must not interleave
    # with another's (two rollbacks at once would both make the same text again).
    _changing: WeakValueDictionary[str, asyncio.Lock] = field(
        default_factory=WeakValueDictionary, init=False, repr=False
    )

    def changing(self, agent_id: str) -> asyncio.Lock:
        """The lock held while the agent's version served is changed (in this process: the
        evolution service runs one replica)."""
        lock = self._changing.get(agent_id)
        if lock is None:
            lock = self._changing[agent_id] = asyncio.Lock()
        return lock

    # -- reading ----------------------------------------------------------------

    async def config(self, agent_id: str) -> EvolutionConfig:
        raw = await self.s.pool.fetchval(
            "SELECT config FROM evolution_config WHERE agent_id = $1", agent_id
        )
        return EvolutionConfig.model_validate(raw) if raw is not None else EvolutionConfig()

    async def agent(self, agent_id: str) -> AgentNow:
        now = await agent_now(self.s.pool, agent_id)
        if now is None:
            raise AppendRejected(f"Agent {agent_id} not found", 404)
        return now

    async def proposal(self, agent_id: str, proposal_id: str) -> dict[str, Any]:
        row = await self.s.pool.fetchrow(
            "SELECT * FROM evolution_proposals WHERE id = $1 AND agent_id = $2",
            proposal_id,
            agent_id,
        )
        if row is None:
            raise AppendRejected(f"proposal {proposal_id} not found", 404)
        return dict(row)

    async def live_canary(self, agent_id: str) -> asyncpg.Record | None:
        """The agent's canary still in progress (running, or passed and awaiting promotion)."""
        return await self.s.pool.fetchrow(
            "SELECT * FROM evolution_rollouts WHERE agent_id = $1"
            " AND status IN ('running', 'completed')",
            agent_id,
        )

    async def end_canary(
        self,
        env: Envelope[Any],
        live: asyncpg.Record,
        reason: str,
        by: Literal["analysis", "operator", "rollback"],
    ) -> int:
        """Record the end of the canary `live`: every conversation back on the stable agent."""
        return await self.record(
            env,
            RolloutAborted(
                agent_id=live["agent_id"],
                proposal_id=live["proposal_id"],
                rollout_id=live["rollout_id"],
                weight=float(live["weight"]),
                reason=reason,
                by=by,
            ),
            "rollout-aborted",
        )

    async def start_next_canary(self, cause: Envelope[Any], agent_id: str, after: str) -> None:
        """A canary's slot is free again (`after`: the rollout or promotion that freed it):
        the oldest proposal waiting for a canary of its own starts one, in the modes that
        start canaries by themselves. One accepted while another's canary ran was refused
        its canary (one at a time) and, with no person to start it, waited forever. A
        proposal whose change no longer fits the agent is passed over (a person trying it
        is told why)."""
        config = await self.config(agent_id)
        if config.mode not in ("canary", "auto"):
            return
        rows = await self.s.pool.fetch(
            "SELECT * FROM evolution_proposals WHERE agent_id = $1"
            " AND status IN ('accepted', 'approved') ORDER BY created_at, id",
            agent_id,
        )
        now = (await self.agent(agent_id)).spec(config)
        for row in rows:
            if not canary_follows(config, approved=row["status"] == "approved"):
                continue
            try:
                made_on(now, await self.change_of(dict(row)))
            except PatchRefused:
                continue
            await self.next_stage(
                cause,
                StartRollout(agent_id=agent_id, proposal_id=row["id"]),
                derived_id("cmd", row["id"], "rollout", after),
            )
            return

    async def within_budget(
        self, env: Envelope[Any], agent_id: str, config: EvolutionConfig
    ) -> None:
        """Go on only while the agent's evolution spent less than its tokens per day;
        otherwise record that the budget ran out (once a day) and refuse with 429.
        Users' runs never pass here: only evolution stops."""
        spent = int(await self.s.pool.fetchval(SPENT_TODAY, agent_id))
        if spent < config.tokens_per_day:
            return
        reason = (
            f"evolution spent {spent} tokens in the last 24 hours, its budget is"
            f" {config.tokens_per_day} (tokens_per_day)"
        )
        day = datetime.now(UTC).date().isoformat()
        await self.record(
            env,
            EvolutionBudgetExhausted(agent_id=agent_id, reason=reason),
            f"budget-{day}",
            event_id=derived_id("evt", agent_id, "budget-exhausted", day),
        )
        raise AppendRejected(f"evolution budget exhausted: {reason}", 429)

    async def _not_too_soon(self, agent_id: str, config: EvolutionConfig) -> None:
        last = await self.s.pool.fetchval(
            "SELECT max(created_at) FROM evolution_proposals WHERE agent_id = $1"
            " AND source <> 'operator' AND status <> 'refused'",
            agent_id,
        )
        if last is None:
            return
        wait = config.min_seconds_between_proposals - (datetime.now(UTC) - last).total_seconds()
        if wait > 0:
            raise AppendRejected(
                f"the agent's last proposal was less than {config.min_seconds_between_proposals}"
                f" s ago (min_seconds_between_proposals): the next one in {wait:.0f} s",
                429,
            )

    async def next_stage(self, cause: Envelope[Any], command: Command, id: str) -> None:
        """A command to the evolution service itself, without waiting: the pipeline's next
        stage (evaluate, roll out, promote), deduplicated by its derived id."""
        agent_id: str = command.agent_id  # type: ignore[attr-defined]
        envelope = cause.caused(command, aggregate_id=agent_id, producer=PRODUCER, id=id)
        await self.s.eventlog.send_command(subjects.evolution_command_subject(agent_id), envelope)

    async def record(
        self,
        env: Envelope[Any],
        decision: EvolutionDecided,
        key: str,
        *,
        event_id: str | None = None,
    ) -> int:
        return await history.record(
            self.s.eventlog,
            self.s.watcher,
            self.s.reads,
            env,
            decision,
            event_id or derived_id("evt", env.id, key),
        )

    # -- commands ---------------------------------------------------------------

    async def configure(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: ConfigureEvolution = env.data
        await self.agent(cmd.agent_id)
        if not self.settings.enabled and cmd.config.enabled:
            raise AppendRejected(
                "evolution is off on this server (O_EVOLUTION_ENABLED=0); an agent cannot"
                " turn it on",
                409,
            )
        seq = await self.record(
            env, EvolutionConfigured(agent_id=cmd.agent_id, config=cmd.config), "configured"
        )
        return Reply(ok=True, seq=seq, result={"config": cmd.config.model_dump(mode="json")})

    async def propose(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: ProposeChange = env.data
        known = await self.s.pool.fetchrow(
            "SELECT status, reason FROM evolution_proposals WHERE id = $1", cmd.proposal_id
        )
        if known is not None:
            return _proposal_reply(cmd.proposal_id, known["status"], known["reason"])
        config = await self.config(cmd.agent_id)
        if not (self.settings.enabled and config.enabled):
            raise AppendRejected(f"evolution is off for agent {cmd.agent_id}", 409)
        now = await self.agent(cmd.agent_id)
        parent = now.spec(config)
        if cmd.source != "operator":
            await self._not_too_soon(cmd.agent_id, config)
        patch, run_ids, tokens = cmd.patch, [], 0
        if patch is None:
            await self.within_budget(env, cmd.agent_id, config)
            runs = await performance.read_runs(self.s.pool, cmd.agent_id, DIGEST_RUNS)
            past = await performance.read_proposals(self.s.pool, cmd.agent_id)
            model = str(now.llm_config.get("handle") or "")
            digest = performance.report(runs, past)
            drafted = await proposer.draft(model, parent, digest, self.settings.retries)
            tokens = drafted.usage.total_tokens
            run_ids = [r.run_id for r in runs]
            if drafted.patch is None:
                return await self._refuse(env, cmd, drafted.problem or "no patch", None)
            patch = drafted.patch
        try:
            _refuse_user_tools(patch, now)
            candidate = apply_patch(parent, patch, config, now.known_tools)
        except PatchRefused as exc:
            return await self._refuse(env, cmd, exc.reason, patch)
        seq = await self.record(
            env,
            ChangeProposed(
                agent_id=cmd.agent_id,
                proposal_id=cmd.proposal_id,
                source=cmd.source,
                parent_version=parent.version_id,
                candidate_version=candidate.version_id,
                parent=parent,
                candidate=candidate,
                patch=patch,
                run_ids=run_ids,
                tokens=tokens,
            ),
            "proposed",
        )
        if config.mode != "propose_only":
            await self.next_stage(
                env,
                EvaluateProposal(agent_id=cmd.agent_id, proposal_id=cmd.proposal_id),
                derived_id("cmd", cmd.proposal_id, "evaluate"),
            )
        return Reply(
            ok=True, seq=seq, result={"proposal_id": cmd.proposal_id, "status": "proposed"}
        )

    async def _refuse(
        self, env: Envelope[Any], cmd: ProposeChange, reason: str, patch: Patch | None
    ) -> Reply:
        await self.record(
            env,
            ProposalRefused(
                agent_id=cmd.agent_id,
                proposal_id=cmd.proposal_id,
                source=cmd.source,
                reason=reason,
                patch=patch,
            ),
            "refused",
        )
        return _proposal_reply(cmd.proposal_id, "refused", reason)

    async def review(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: ReviewProposal = env.data
        row = await self.proposal(cmd.agent_id, cmd.proposal_id)
        if cmd.approve:
            if row["status"] == "approved":
                return _proposal_reply(cmd.proposal_id, "approved", None)
            if row["status"] != "accepted":
                raise AppendRejected(
                    f"proposal {cmd.proposal_id} is {row['status']}: only a proposal the gate"
                    " accepted can be approved",
                    409,
                )
            decision: EvolutionDecided = ProposalApproved(
                agent_id=cmd.agent_id, proposal_id=cmd.proposal_id, note=cmd.note
            )
        else:
            if row["status"] in ("refused", "promoted"):
                raise AppendRejected(f"proposal {cmd.proposal_id} is {row['status']}", 409)
            decision = ProposalRejected(
                agent_id=cmd.agent_id,
                proposal_id=cmd.proposal_id,
                reason=cmd.note or "rejected by a reviewer",
            )
        seq = await self.record(env, decision, "reviewed")
        if cmd.approve and canary_follows(await self.config(cmd.agent_id), approved=True):
            await self.next_stage(
                env,
                StartRollout(agent_id=cmd.agent_id, proposal_id=cmd.proposal_id),
                derived_id("cmd", cmd.proposal_id, "rollout"),
            )
        status = "approved" if cmd.approve else "rejected"
        return Reply(ok=True, seq=seq, result={"proposal_id": cmd.proposal_id, "status": status})

    async def promote(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: PromoteProposal = env.data
        async with self.changing(cmd.agent_id):
            reply = await self._promote(env, delivery, cmd)
        await self.start_next_canary(env, cmd.agent_id, cmd.proposal_id)
        return reply

    async def _promote(self, env: Envelope[Any], delivery: Delivery, cmd: PromoteProposal) -> Reply:
        row = await self.proposal(cmd.agent_id, cmd.proposal_id)
        config = await self.config(cmd.agent_id)
        ready = {"approved"} if config.approval_before_canary else {"approved", "accepted"}
        # A canary in progress may be promoted by a person at any step.
        ready |= {"canary", "awaiting_promotion"}
        if row["status"] not in (*ready, "promoted"):
            raise AppendRejected(
                f"proposal {cmd.proposal_id} is {row['status']}: promotion needs "
                + (
                    "a reviewer's approval"
                    if config.approval_before_canary
                    else "the gate's acceptance"
                ),
                409,
            )
        if row["status"] == "promoted":
            # (Delivered again, or asked twice: its decision is recorded after its effects,
            # so both are done.)
            served = await self._serving(cmd.agent_id, config)
            return Reply(ok=True, result={"version_id": served, "decision_seq": 0, "agent_seq": 0})
        change = await self.change_of(row)

        def promoted(previous: str, spec: VersionSpec) -> EvolutionDecided:
            return VersionPromoted(
                agent_id=cmd.agent_id,
                proposal_id=cmd.proposal_id,
                version_id=spec.version_id,
                spec=spec,
                previous_version=previous,
            )

        # (A redelivery's block edits may be made already: the memory service answers those
        # from its record, so only a first delivery checks them beforehand.)
        async def not_yet(conn: asyncpg.Connection) -> bool:
            status = await conn.fetchval(
                "SELECT status FROM evolution_proposals WHERE id = $1", cmd.proposal_id
            )
            return bool(status != "promoted")

        return await self._serve_change(
            env,
            cmd.agent_id,
            config,
            change,
            promoted,
            check_blocks=not delivery.redelivered,
            key=f"promotion {cmd.proposal_id}",
            still=not_yet,
            take_back_if_refused=False,
        )

    async def change_of(self, row: dict[str, Any]) -> Change:
        """A proposal's parent, candidate and patch, as proposed."""
        agent_id = row["agent_id"]
        return Change.of_proposal(
            VersionSpec.model_validate(await self._spec(agent_id, row["parent_version"])),
            VersionSpec.model_validate(await self._spec(agent_id, row["candidate_version"])),
            Patch.model_validate(row["patch"]),
        )

    async def _serve_change(
        self,
        env: Envelope[Any],
        agent_id: str,
        config: EvolutionConfig,
        change: Change,
        decision: Callable[[str, VersionSpec], EvolutionDecided],
        *,
        check_blocks: bool,
        key: str,
        still: Callable[[asyncpg.Connection], Awaitable[bool]],
        take_back_if_refused: bool,
    ) -> Reply:
        """Make a change on the agent as it is now (o_evolution/rebase.py): its block edits
        by the memory service on each block's current value, the other fields three-way on
        the agent's subject; then the decision, naming the version that results. Each
        effect has an id derived from `key` (a promotion's proposal, so that any command
        promoting it, a redelivery or a second one racing the first, makes it once; a
        rollback's command); the decision is recorded only while `still` holds at the
        subject's last decision. The fields (and with `check_blocks` the blocks) are checked
        before any effect. Refused after some of its block edits were made (a block the
        agent changed in between), those are taken back if `take_back_if_refused` (effects
        named by the command: a retry is another command, which makes them again, and the
        same command again is refused as before: `_not_refused_before`); else they stay,
        and the next try (named the same) makes only the rest."""
        # (Never served by evolution before: the version before is the change's base.)
        previous = await self._served_id(agent_id) or change.base.version_id
        now = await self.agent(agent_id)
        try:
            if check_blocks:
                made_on(now.spec(config), change)
            else:
                merged_fields(now.spec(config), change)
        except PatchRefused as exc:
            raise AppendRejected(
                f"the change cannot be made on the agent: {exc.reason}", 409
            ) from None
        if take_back_if_refused:
            await self._not_refused_before(env, now, config, change, key)
        edited: list[str] = []  # the labels edited so far
        try:
            for label, edits in change.edits.items():
                block_id = now.block_ids.get(label)
                if block_id is None:
                    raise AppendRejected(f"the agent no longer has the block '{label}'", 409)
                reply = await self._edit_block(env, block_id, edits, (key, "block", label))
                if not reply.ok:
                    raise AppendRejected(f"block {label}: {reply.error}", reply.status or 409)
                edited.append(label)
            seq = await self._change_fields(env, agent_id, config, change, key)
        except AppendRejected:
            if take_back_if_refused:
                await self._take_back(env, now, config, change, key, edited)
            raise
        served = (await self.agent(agent_id)).spec(config)

        async def decided_at(conn: asyncpg.Connection) -> EvolutionDecided | None:
            return decision(previous, served) if await still(conn) else None

        decided = await history.record_if(
            self.s.eventlog,
            self.s.watcher,
            self.s.reads,
            env,
            agent_id,
            decided_at,
            derived_id("evt", key, "served"),
        )
        return _served(served, decided or 0, seq)

    async def _edit_block(
        self,
        env: Envelope[Any],
        block_id: str,
        edits: list[TextEdit],
        name: tuple[str, ...],
    ) -> Reply:
        """Text edits made by the memory service on the block's value as it is then, under
        a command id derived from `name` (made once, however often sent)."""
        command = env.caused(
            EditBlockText(block_id=block_id, edits=edits),
            aggregate_id=block_id,
            producer=PRODUCER,
            id=derived_id("cmd", *name),
        )
        return await send_and_wait(
            self.s.eventlog,
            subjects.memory_command_subject(block_id),
            command,
            timeout=BLOCK_TIMEOUT,
        )

    async def _take_back(
        self,
        env: Envelope[Any],
        now: AgentNow,
        config: EvolutionConfig,
        change: Change,
        key: str,
        edited: list[str],
    ) -> None:
        before = now.spec(config).blocks
        for label in reversed(edited):
            undo = change.taking_back(label, before.get(label, ""))
            reply = None
            if undo:
                name = (key, "block", label, "taken back")
                reply = await self._edit_block(env, now.block_ids[label], undo, name)
            if reply is None or not reply.ok:
                log.warning(
                    "agent %s: change %s refused; its edits of block %s could not be taken"
                    " back (%s)",
                    now.agent_id,
                    key,
                    label,
                    reply.error if reply is not None else "no way to tell them back",
                )

    async def _not_refused_before(
        self, env: Envelope[Any], now: AgentNow, config: EvolutionConfig, change: Change, key: str
    ) -> None:
        """Refuse a change that was refused before (some of its edits taken back) as it was.
        Its edits are named by the command, so made again they would be answered from the
        memory service's record and not made, and its decision would claim edits that were
        taken back (a retry under the same Idempotency-Key). The edits it made and has not
        taken back yet (its delivery stopped mid-way) are taken back first."""
        made = {derived_id("cmd", key, "block", label): label for label in change.edits}
        undone = {derived_id("cmd", key, "block", label, "taken back") for label in change.edits}
        found = {
            r["command_id"]
            for r in await self.s.pool.fetch(
                "SELECT DISTINCT command_id FROM block_versions WHERE command_id = ANY($1)",
                [*made, *undone],
            )
        }
        if not found & undone:
            return
        await self._take_back(env, now, config, change, key, [made[c] for c in made if c in found])
        raise AppendRejected(
            "this change was refused before and what it had made was taken back; the same"
            " request again is the same change: send a new Idempotency-Key to ask again",
            409,
        )

    async def _change_fields(
        self, env: Envelope[Any], agent_id: str, config: EvolutionConfig, change: Change, key: str
    ) -> int:
        """The change's other fields, three-way on the agent as its subject has it: the
        position of the agent's update (0: nothing to change)."""

        async def decide(last: int) -> Envelope[AgentUpdated] | None:
            fresh = await self.agent(agent_id)
            try:
                fields = merged_fields(fresh.spec(config), change)
            except PatchRefused as exc:
                raise AppendRejected(f"the change cannot be made: {exc.reason}", 409) from None
            changes = agent_changes(fresh, VersionSpec(**fields))
            if not changes:
                return None
            return env.caused(
                AgentUpdated(agent_id=agent_id, changes=changes),
                aggregate_id=agent_id,
                producer=PRODUCER,
                id=derived_id("evt", key, "agent"),
            )

        appended = await self.s.eventlog.append_decided(subjects.agent_subject(agent_id), decide)
        seq = appended.seq if appended is not None else 0
        if seq:
            await self.s.watcher.wait(seq, AGENTS)
        return seq

    async def roll_back(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        """Serve an earlier version again: each decision since taken back, made on the agent
        as it is (o_evolution/rebase.py), so what its memory tools wrote in its blocks since
        stays. Refused if another change to the version served was made while it waited
        for its turn (a second click): it was asked of what was served before."""
        cmd: RollBackVersion = env.data
        since = await self._serving_seq(self.s.pool, cmd.agent_id)
        async with self.changing(cmd.agent_id):
            # This very command made before (sent again while it was being made, a
            # client's retry under its Idempotency-Key, a redelivery however late): its
            # decision is its record. Made again, it would take back what came after it.
            done = await self._decision(cmd.agent_id, derived_id("evt", env.id, "served"))
            if done is not None:
                return done
            if await self._serving_seq(self.s.pool, cmd.agent_id) != since:
                raise AppendRejected(
                    "the version served changed while this rollback waited for another"
                    " change to it; ask again if it is still wanted",
                    409,
                )
            return await self._roll_back(env, cmd, since)

    async def _decision(self, agent_id: str, event_id: str) -> Reply | None:
        """The answer to the command whose decision is `event_id`, if it was recorded (read
        with the projection at the subject's last decision)."""
        last = await self.s.eventlog.last_seq(subjects.evolution_subject(agent_id))
        async with self.s.reads.at(last, EVOLUTION) as conn:
            row = await conn.fetchrow(
                "SELECT seq, payload->>'version_id' AS version_id FROM evolution_history"
                " WHERE agent_id = $1 AND event_id = $2",
                agent_id,
                event_id,
            )
        if row is None:
            return None
        result = {"version_id": row["version_id"], "decision_seq": row["seq"], "agent_seq": 0}
        return Reply(ok=True, result=result)

    async def _roll_back(self, env: Envelope[Any], cmd: RollBackVersion, since: int) -> Reply:
        target = VersionSpec.model_validate(await self._spec(cmd.agent_id, cmd.version_id))
        config = await self.config(cmd.agent_id)
        live = await self.live_canary(cmd.agent_id)
        if live is not None:
            # All traffic goes to the target: the canary ends first.
            await self.end_canary(env, live, f"rolled back to {target.version_id}", "rollback")
        served = await self._served_spec(cmd.agent_id, config)
        steps = await self._steps_back_to(cmd.agent_id, served, target)
        change = Change.back_to(served, target, steps)

        def rolled_back(previous: str, spec: VersionSpec) -> EvolutionDecided:
            return VersionRolledBack(
                agent_id=cmd.agent_id,
                version_id=spec.version_id,
                spec=spec,
                previous_version=previous,
                requested_by=cmd.requested_by,
                reason=cmd.reason,
                made=change.edits,
                taken_back=dict(change.inverse or {}),
            )

        async def unchanged(conn: asyncpg.Connection) -> bool:
            return await self._serving_seq(conn, cmd.agent_id) == since

        # (Its blocks are checked by the memory service only: an agent's own rollback is
        # carried out within its tool call's delivery, which may be a redelivery. Its
        # effects are named by the command: delivered again, it makes them once.)
        return await self._serve_change(
            env,
            cmd.agent_id,
            config,
            change,
            rolled_back,
            check_blocks=False,
            key=env.id,
            still=unchanged,
            take_back_if_refused=True,
        )

    @staticmethod
    async def _serving_seq(conn: asyncpg.Pool | asyncpg.Connection, agent_id: str) -> int:
        """The position of the decision that made the version served what it is (0: none)."""
        seq = await conn.fetchval(
            "SELECT max(seq) FROM evolution_history WHERE agent_id = $1"
            " AND type IN ('VersionPromoted', 'VersionRolledBack')",
            agent_id,
        )
        return int(seq or 0)

    async def _steps_back_to(
        self, agent_id: str, served: VersionSpec, target: VersionSpec
    ) -> list[Step] | None:
        """The decisions (promotions and rollbacks) that led from `target` to the version
        served, newest first, with the block edits each made; None unless the history
        leads from one to the other."""
        rows = await self.s.pool.fetch(
            "SELECT h.type, h.payload, p.patch FROM evolution_history h"
            " LEFT JOIN evolution_proposals p ON p.id = h.payload->>'proposal_id'"
            " WHERE h.agent_id = $1 AND h.type IN ('VersionPromoted', 'VersionRolledBack')"
            " ORDER BY h.seq DESC",
            agent_id,
        )
        chain, expected = [], served.version_id
        for row in rows:
            if expected == target.version_id:
                break
            decision = row["payload"]
            if decision["version_id"] != expected:
                return None
            spec = VersionSpec.model_validate(decision["spec"])
            if row["type"] == "VersionPromoted":
                patch = row["patch"]
                edits = block_edits(Patch.model_validate(patch)) if patch is not None else None
                chain.append(Step.promotion(spec, edits))
            else:
                made = decision.get("made")
                chain.append(
                    Step.rollback(
                        spec,
                        _BLOCK_EDITS.validate_python(made) if made is not None else None,
                        _KNOWN_EDITS.validate_python(decision.get("taken_back") or {}),
                    )
                )
            expected = decision["previous_version"]
        return chain if expected == target.version_id else None

    async def _served_spec(self, agent_id: str, config: EvolutionConfig) -> VersionSpec:
        """The version evolution last served (the agent as it is, if it never served one)."""
        served = await self._served_id(agent_id)
        if served is None:
            return (await self.agent(agent_id)).spec(config)
        return VersionSpec.model_validate(await self._spec(agent_id, served))

    async def _spec(self, agent_id: str, version_id: str) -> Any:
        raw = await self.s.pool.fetchval(
            "SELECT spec FROM agent_versions WHERE agent_id = $1 AND version_id = $2",
            agent_id,
            version_id,
        )
        if raw is None:
            raise AppendRejected(f"agent {agent_id} has no version {version_id}", 404)
        return raw

    async def _serving(self, agent_id: str, config: EvolutionConfig) -> str:
        served = await self._served_id(agent_id)
        return served or (await self.agent(agent_id)).spec(config).version_id

    async def _served_id(self, agent_id: str) -> str | None:
        """The version evolution last served (promoted or rolled back to), if any."""
        served = await self.s.pool.fetchval(
            "SELECT version_id FROM evolution_serving WHERE agent_id = $1", agent_id
        )
        return str(served) if served is not None else None


def canary_follows(config: EvolutionConfig, *, approved: bool) -> bool:
    """Whether an accepted proposal goes on to a canary by itself: in modes canary and
    auto, once a person approved it if the approval gate is on (never in mode auto)."""
    if config.mode not in ("canary", "auto"):
        return False
    return approved or not config.approval_before_canary or config.mode == "auto"


def _served(spec: VersionSpec, decided: int, agent_seq: int) -> Reply:
    # Two positions: the decision's on the evolution subject, the agent's change on its own
    # (each for the read model that follows that subject).
    return Reply(
        ok=True,
        result={"version_id": spec.version_id, "decision_seq": decided, "agent_seq": agent_seq},
    )


def _refuse_user_tools(patch: Patch, now: AgentNow) -> None:
    for op in patch.ops:
        name = getattr(op, "name", None)
        if op.op in ("add_tool", "remove_tool") and name in now.user_tools:
            raise PatchRefused(
                f"tool '{name}' is a user's tool: users' tools are attached and detached"
                " through the API, not by evolution"
            )


def _proposal_reply(proposal_id: str, status: str, reason: str | None) -> Reply:
    if status == "refused":
        return Reply(
            ok=False,
            status=422,
            error=f"proposal refused: {reason}",
            result={"proposal_id": proposal_id, "status": status},
        )
    return Reply(ok=True, result={"proposal_id": proposal_id, "status": status})

"""The canary's sampled judge (issue 14 point 5): at each analysis, a few of the step's
live candidate runs are answered again in the shadow by the stable agent, and the
frozen judge compares the two answers in both orders, as the shadow gate does.

The candidate's answer is the one the user got (read off the log); the stable agent's
is a shadow run from a snapshot as of the run's start (nothing it does leaves the
shadow). A comparison that cannot be made faithfully (a tool with effects the stable
agent would call differently) counts for neither arm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from o_contracts.events import LLMResponded
from o_contracts.evolution import VersionSpec
from o_evolution import gate, judge
from o_evolution.evaluation import conversation_text
from o_evolution.settings import EvolutionSettings
from o_evolution.shadow_cases import answer_text, live_model, run_arm
from o_executor.shadow.runner import read_run
from o_executor.shadow.snapshot import Snapshots
from o_runtime.eventlog import EventLog


@dataclass(frozen=True)
class Sampled:
    wins: int = 0
    losses: int = 0


async def sampled_judgement(
    eventlog: EventLog,
    settings: EvolutionSettings,
    agent_id: str,
    runs: Sequence[tuple[str, str | None, int]],
    stable: VersionSpec,
    snapshots: Snapshots,
) -> Sampled:
    """The judge's verdicts on `runs` (run id, conversation id, RunStarted's position):
    live candidate answers against the stable agent's answers in the shadow, on snapshots
    from `snapshots` (kept from one analysis to the next: each reads on from the last)."""
    wins = losses = 0
    model = live_model(settings.retries)
    taken = await snapshots.many(
        agent_id, [(seq - 1, conversation) for _, conversation, seq in runs]
    )
    for (run_id, conversation_id, started_seq), snapshot in zip(runs, taken, strict=True):
        recorded = await read_run(eventlog, agent_id, run_id, conversation_id, since=started_seq)
        answers = [e.message for e in recorded.events if isinstance(e, LLMResponded)]
        candidate = answer_text(answers)
        if snapshot.seq != recorded.started_seq - 1:
            snapshot = await snapshots.at(agent_id, recorded.started_seq - 1, conversation_id)
        shadow = await run_arm(snapshot, recorded, stable, model)
        if shadow.result.inconclusive is not None:
            continue
        text = conversation_text(recorded)
        first = await judge.judge(
            settings.judge_model, text, shadow.result.answer, candidate, settings.retries
        )
        second = await judge.judge(
            settings.judge_model, text, candidate, shadow.result.answer, settings.retries
        )
        preferred = gate.judged(first.preference, second.preference)
        wins += preferred == "candidate"
        losses += preferred == "parent"
    return Sampled(wins, losses)

"""The performance digest an agent reads and its proposals are drafted from
(o_evolution/performance.py)."""

from __future__ import annotations

from typing import Any

from o_evolution.evaluation import resident_mb
from o_evolution.performance import PastProposal, RunFacts, report


def facts(n: int, **changes: Any) -> RunFacts:
    fields: dict[str, Any] = {
        "run_id": f"run-{n}",
        "conversation_id": None,
        "stop_reason": "end_turn",
        "failed": False,
        "steps": 1,
        "tokens": 100,
        "latency_ms": 20.0,
        "tool_errors": 0,
        "tools_used": (),
        "feedback": None,
        "version": "current",
    }
    return RunFacts(**(fields | changes))


def test_six_runs_with_two_tool_errors_are_counted_as_they_were() -> None:
    runs = [facts(n) for n in range(4)] + [
        facts(4, tool_errors=1, tools_used=("lookup",), steps=2),
        facts(5, tool_errors=1, tools_used=("lookup",), steps=2, feedback="negative"),
    ]
    text = report(runs, [])
    assert text.splitlines()[0] == (
        "Recent runs (newest 6): 6 runs, 0 failed (0%), 2 tool errors in 2 runs (33%),"
        " 1.3 steps and 100 tokens per run, median 20 ms; feedback: 1 negative, 0 positive."
    )
    assert (
        "- tool:lookup: 2 runs, 0 failed (0%), 2 tool errors in 2 runs (100%), 2.0 steps and"
        " 100 tokens per run, median 20 ms; feedback: 1 negative, 0 positive"
    ) in text
    assert "- feedback:negative: 1 runs" in text
    assert "- run run-4: stop end_turn, 2 steps, 1 tool errors" in text
    assert "Stop reasons: end_turn 6." in text


def test_the_current_version_is_compared_with_the_previous_one() -> None:
    runs = [facts(0), facts(1, failed=True, stop_reason="error", version="previous")]
    lines = report(runs, []).splitlines()
    assert lines[1].startswith("Current version: 1 runs, 0 failed (0%)")
    assert lines[2].startswith("Previous version: 1 runs, 1 failed (100%)")


def test_earlier_proposals_are_listed_by_the_fields_they_touched() -> None:
    rejected = PastProposal(
        "proposal-1", "agent", "rejected", "slice tool:lookup regresses", ("system",), "shorter"
    )
    text = report([facts(0)], [rejected])
    assert (
        "- proposal-1 [system] from agent: rejected (slice tool:lookup regresses)."
        " Rationale: shorter"
    ) in text
    assert text.endswith(
        "Do not propose again a change the gate rejected unless the runs above show the"
        " evidence changed."
    )


def test_no_runs_say_so() -> None:
    assert report([], []) == "Recent runs (newest 0): no runs."


def test_the_shadow_worker_reads_its_own_resident_memory() -> None:
    rss = resident_mb()
    assert rss is not None and 10 < rss < 4096

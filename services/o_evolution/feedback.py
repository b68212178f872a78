"""Step feedback as evolution reads it.

Users rate steps (Letta's `PATCH /v1/steps/{step_id}/feedback`); the gateway records
`StepFeedbackGiven` and the executor's runs projection keeps the latest rating in
`steps.feedback` ('positive', 'negative' or NULL). Evolution judges runs, so a run is
rated by its steps: negative when any step was rated negative (one bad step is what
the user complained about, whatever else went well), else positive when any step was
rated positive, else unrated.

The SQL here is for queries over `runs`: the shadow's cases (their feedback slice),
the proposer's digest (negative ratings per run) and a canary's analysis (runs rated
negative per arm).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

Sign = Literal["positive", "negative"]


def run_feedback(step_feedback: Iterable[str | None]) -> Sign | None:
    """A run's rating from its steps' ratings (None: a step not rated)."""
    given = set(step_feedback)
    if "negative" in given:
        return "negative"
    if "positive" in given:
        return "positive"
    return None


def rated_steps_of(run: str) -> str:
    """SQL: the ratings of the rated steps of the run row `run` (a table name or alias),
    as a text array for `run_feedback`."""
    return (
        "(SELECT coalesce(array_agg(s.feedback), '{}') FROM steps s"
        f" WHERE s.run_id = {run}.id AND s.feedback IS NOT NULL)"
    )


def negative_steps_of(run: str) -> str:
    """SQL: how many steps of the run row `run` (a table name or alias) were rated negative."""
    return f"(SELECT count(*) FROM steps s WHERE s.run_id = {run}.id AND s.feedback = 'negative')"

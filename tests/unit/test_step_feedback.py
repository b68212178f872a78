"""Step feedback without infrastructure: what a feedback request records (Letta's rules for
null feedback and empty tags), how a run is rated by its steps, and how the proposer's
digest (tests/unit/test_evolution_performance.py) shows them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from o_contracts.envelope import Envelope, decode
from o_contracts.events import StepFeedbackGiven
from o_evolution.feedback import run_feedback
from o_evolution.gate import CaseRef, select_cases
from o_gateway.routes.steps import feedback_given
from o_gateway.schemas import StepFeedbackBody

STEP = {"id": "step-1", "run_id": "run-1", "agent_id": "agent-1"}


def test_feedback_with_tags_records_both() -> None:
    body = StepFeedbackBody.model_validate({"feedback": "negative", "tags": ["rude", "slow"]})
    assert feedback_given(STEP, body) == StepFeedbackGiven(
        run_id="run-1",
        agent_id="agent-1",
        step_id="step-1",
        feedback="negative",
        tags=["rude", "slow"],
    )


def test_null_feedback_clears_it_and_empty_tags_keep_the_steps_tags() -> None:
    for raw in ({}, {"feedback": None, "tags": []}, {"feedback": None, "tags": None}):
        event = feedback_given(STEP, StepFeedbackBody.model_validate(raw))
        assert (event.feedback, event.tags) == (None, None), raw


def test_feedback_other_than_positive_or_negative_is_refused() -> None:
    for bad in ("neutral", "POSITIVE", 1, True):
        with pytest.raises(ValidationError):
            StepFeedbackBody.model_validate({"feedback": bad})
    with pytest.raises(ValidationError):
        StepFeedbackBody.model_validate({"feedback": "positive", "tags": "rude"})


def test_the_event_travels_through_the_log_encoding_unchanged() -> None:
    event = StepFeedbackGiven(
        run_id="run-1", agent_id="agent-1", step_id="step-1", feedback="positive", tags=None
    )
    envelope = Envelope.wrap(event, aggregate_id="agent-1", producer="gateway")
    assert decode(envelope.encode()).data == event


def test_a_run_with_any_negative_step_is_rated_negative() -> None:
    assert run_feedback(["positive", "negative", "positive"]) == "negative"
    assert run_feedback([None, "negative"]) == "negative"


def test_a_run_with_only_positive_ratings_is_positive_and_one_without_any_unrated() -> None:
    assert run_feedback(["positive", None]) == "positive"
    assert run_feedback([]) is None
    assert run_feedback([None, None]) is None


def test_case_selection_keeps_each_runs_feedback() -> None:
    refs = [
        CaseRef("run-1", None, 10, feedback="negative"),
        CaseRef("run-2", None, 20),
        CaseRef("run-3", "conv-1", 30, feedback="positive"),
    ]
    chosen = select_cases(refs, n=3, per_conversation=3)
    assert [(r.run_id, r.feedback) for r in chosen] == [
        ("run-1", "negative"),
        ("run-2", None),
        ("run-3", "positive"),
    ]

"""Step feedback without infrastructure: what a feedback request records (Letta's rules for
null feedback and empty tags)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from o_contracts.envelope import Envelope, decode
from o_contracts.events import StepFeedbackGiven
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

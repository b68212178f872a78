-- Letta's step feedback (PATCH /v1/steps/{step_id}/feedback; event StepFeedbackGiven,
-- projection "runs"): the latest rating of a step and its tags. Evolution reads them
-- (a run's cases are sliced by their feedback; a run counts as negatively rated when
-- any of its steps is: o_evolution/feedback.py).
ALTER TABLE steps ADD COLUMN IF NOT EXISTS feedback text
    CHECK (feedback IN ('positive', 'negative'));
ALTER TABLE steps ADD COLUMN IF NOT EXISTS tags text[] NOT NULL DEFAULT '{}';
-- Few steps are rated: the feedback filters of GET /v1/steps/ read these alone.
CREATE INDEX IF NOT EXISTS steps_feedback ON steps (seq) WHERE feedback IS NOT NULL;

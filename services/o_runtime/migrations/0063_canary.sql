-- Issue 14 point 5: canary rollouts of an evolved agent.
-- Which arm each live run took (RunStarted.version; projection "runs").
ALTER TABLE runs ADD COLUMN IF NOT EXISTS rollout_id text;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS rollout_arm text;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS rollout_weight double precision;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS version_id text;
CREATE INDEX IF NOT EXISTS runs_rollout ON runs (rollout_id, rollout_weight)
    WHERE rollout_id IS NOT NULL;

-- Every canary and where it stands (projection "evolution"). The executor reads the
-- running one with the agent: its candidate takes `weight` percent of conversations.
CREATE TABLE IF NOT EXISTS evolution_rollouts (
    rollout_id      text PRIMARY KEY,
    agent_id        text NOT NULL,
    proposal_id     text NOT NULL,
    version_id      text NOT NULL,
    spec            jsonb NOT NULL,
    stable_version  text NOT NULL,
    weight          double precision NOT NULL,
    steps           integer[] NOT NULL,
    -- running, completed (passed at full traffic, awaiting promotion), aborted, promoted
    status          text NOT NULL,
    reason          text,
    started_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS evolution_rollouts_live ON evolution_rollouts (agent_id)
    WHERE status IN ('running', 'completed');

-- What drafting a proposal cost (its cases' tokens are in evolution_cases): the daily
-- token budget adds both.
ALTER TABLE evolution_proposals ADD COLUMN IF NOT EXISTS draft_tokens bigint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS evolution_cases_agent ON evolution_cases (agent_id, created_at);

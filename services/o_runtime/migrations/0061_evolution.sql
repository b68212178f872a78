-- Issue 14: self-evolution (projection "evolution", the evolution service's).
-- Every decision on an agent's evolution subject, in order, with its hash link.
CREATE TABLE IF NOT EXISTS evolution_history (
    agent_id     text NOT NULL,
    seq          bigint NOT NULL,
    type         text NOT NULL,
    prev_hash    text NOT NULL,
    hash         text NOT NULL,
    payload      jsonb NOT NULL,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (agent_id, seq)
);

CREATE TABLE IF NOT EXISTS evolution_config (
    agent_id     text PRIMARY KEY,
    config       jsonb NOT NULL,
    updated_at   timestamptz NOT NULL
);

-- Every version an agent had or was offered (content-addressed: the id is its hash).
CREATE TABLE IF NOT EXISTS agent_versions (
    agent_id     text NOT NULL,
    version_id   text NOT NULL,
    parent_id    text,
    spec         jsonb NOT NULL,
    patch        jsonb,
    rationale    text NOT NULL DEFAULT '',
    run_ids      text[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (agent_id, version_id)
);

CREATE TABLE IF NOT EXISTS evolution_proposals (
    id                text PRIMARY KEY,
    agent_id          text NOT NULL,
    source            text NOT NULL,
    -- proposed, refused, accepted, rejected (by the gate or a human), approved, promoted
    status            text NOT NULL,
    parent_version    text,
    candidate_version text,
    patch             jsonb,
    rationale         text NOT NULL DEFAULT '',
    reason            text,
    report            jsonb,
    approved          boolean,
    tokens            bigint NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS evolution_proposals_agent ON evolution_proposals (agent_id, created_at);

CREATE TABLE IF NOT EXISTS evolution_cases (
    proposal_id  text NOT NULL,
    n            integer NOT NULL,
    agent_id     text NOT NULL,
    body         jsonb NOT NULL,
    tokens       bigint NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (proposal_id, n)
);

-- Which version each agent serves (none until its first promotion: the agent as configured).
CREATE TABLE IF NOT EXISTS evolution_serving (
    agent_id        text PRIMARY KEY,
    version_id      text NOT NULL,
    updated_at      timestamptz NOT NULL
);

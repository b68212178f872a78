-- Archives: archival passages agents share (projection "archival", the memory service's;
-- events/archives.py). A passage in an archive has `archive_id`; `agent_id` is the agent
-- that wrote it, NULL when it came in through the archive's own API. An agent's archival
-- memory is its own passages (archive_id IS NULL) and its archives' passages.
CREATE TABLE IF NOT EXISTS archives (
    id              text PRIMARY KEY,
    name            text NOT NULL,
    description     text,
    embedding_model text NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    last_seq        bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS archives_created ON archives (created_at, id);
CREATE INDEX IF NOT EXISTS archives_name ON archives (name);
-- Which agents an archive is attached to; `attached_seq` orders an agent's archives (its
-- first one takes what it writes).
CREATE TABLE IF NOT EXISTS archive_agents (
    archive_id   text NOT NULL,
    agent_id     text NOT NULL,
    attached_seq bigint NOT NULL,
    PRIMARY KEY (archive_id, agent_id)
);
CREATE INDEX IF NOT EXISTS archive_agents_agent ON archive_agents (agent_id, attached_seq);
ALTER TABLE passages ALTER COLUMN agent_id DROP NOT NULL;
ALTER TABLE passages ADD COLUMN IF NOT EXISTS archive_id text;
-- A client's metadata for a passage it put in an archive (Letta's `metadata`).
ALTER TABLE passages ADD COLUMN IF NOT EXISTS metadata jsonb NOT NULL DEFAULT '{}';
CREATE INDEX IF NOT EXISTS passages_archive_created ON passages (archive_id, created_at, id)
    WHERE archive_id IS NOT NULL;
-- archival_effects.agent_id is the aggregate the effect belongs to: an agent, or an archive.

-- Identities (projection "identities", the gateway's; events/identities.py): Letta's
-- identities, and the agents and blocks each has (reads join the live agents and blocks).
CREATE TABLE IF NOT EXISTS identities (
    id             text PRIMARY KEY,
    identifier_key text NOT NULL,
    name           text NOT NULL,
    identity_type  text NOT NULL,
    project_id     text,
    properties     jsonb NOT NULL DEFAULT '[]',
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    last_seq       bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS identities_created ON identities (created_at, id);
CREATE INDEX IF NOT EXISTS identities_key ON identities (identifier_key);
CREATE TABLE IF NOT EXISTS identity_agents (
    identity_id text NOT NULL,
    agent_id    text NOT NULL,
    PRIMARY KEY (identity_id, agent_id)
);
CREATE INDEX IF NOT EXISTS identity_agents_agent ON identity_agents (agent_id);
CREATE TABLE IF NOT EXISTS identity_blocks (
    identity_id text NOT NULL,
    block_id    text NOT NULL,
    PRIMARY KEY (identity_id, block_id)
);
CREATE INDEX IF NOT EXISTS identity_blocks_block ON identity_blocks (block_id);

-- Memory service's projection of core memory blocks (projection "memory").
CREATE TABLE IF NOT EXISTS blocks (
    id          text PRIMARY KEY,
    label       text NOT NULL,
    value       text NOT NULL,
    "limit"     integer NOT NULL,
    description text,
    read_only   boolean NOT NULL DEFAULT false,
    metadata    jsonb NOT NULL DEFAULT '{}',
    tags        text[] NOT NULL DEFAULT '{}',
    version     integer NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    last_seq    bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS blocks_created ON blocks (created_at, id);

-- Every version of every block, so history can be listed and restored.
CREATE TABLE IF NOT EXISTS block_versions (
    block_id   text NOT NULL,
    version    integer NOT NULL,
    value      text NOT NULL,
    changes    jsonb NOT NULL,
    actor      text NOT NULL,
    agent_id   text,
    seq        bigint NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (block_id, version)
);

-- Which blocks each agent has, in attach order. A block shared by several
-- agents has several rows; deleting an agent removes only its rows.
CREATE TABLE IF NOT EXISTS agent_blocks (
    agent_id text NOT NULL,
    block_id text NOT NULL,
    position bigint NOT NULL,
    PRIMARY KEY (agent_id, block_id)
);
CREATE INDEX IF NOT EXISTS agent_blocks_block ON agent_blocks (block_id);

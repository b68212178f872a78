-- Gateway's projection of the tool registry (projection "tools", issue 5).
CREATE TABLE IF NOT EXISTS tools (
    id                        text PRIMARY KEY,
    name                      text NOT NULL,
    description               text,
    source_type               text NOT NULL DEFAULT 'python',
    source_code               text NOT NULL,
    json_schema               jsonb NOT NULL,
    tags                      text[] NOT NULL DEFAULT '{}',
    return_char_limit         integer NOT NULL DEFAULT 50000,
    default_requires_approval boolean NOT NULL DEFAULT false,
    idempotent                boolean NOT NULL DEFAULT false,
    metadata                  jsonb NOT NULL DEFAULT '{}',
    created_at                timestamptz NOT NULL,
    updated_at                timestamptz NOT NULL,
    last_seq                  bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS tools_name ON tools (name, created_at);
CREATE INDEX IF NOT EXISTS tools_created ON tools (created_at, id);

-- User tools attached to an agent, in attach order, and the agent's tool
-- secrets as Fernet ciphertext (never plaintext; see o_runtime.tool_secrets).
ALTER TABLE agents ADD COLUMN IF NOT EXISTS tool_ids text[] NOT NULL DEFAULT '{}';
ALTER TABLE agents ADD COLUMN IF NOT EXISTS encrypted_secrets jsonb NOT NULL DEFAULT '{}';

-- Issue 12: conversations (projection "runs"). An agent has many; each has its own
-- in-context messages and run order. The default conversation is the agent's own
-- messages (conversation_id NULL).
CREATE TABLE IF NOT EXISTS conversations (
    id                text PRIMARY KEY,
    agent_id          text NOT NULL,
    summary           text,
    model             text,
    model_settings    jsonb,
    system_message_id text NOT NULL,
    forked_from       text,
    deleted           boolean NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    last_message_at   timestamptz,
    last_seq          bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS conversations_agent ON conversations (agent_id, created_at);

ALTER TABLE messages ADD COLUMN IF NOT EXISTS conversation_id text;
-- The compiled system prompt shown as a conversation's first message. The
-- executor compiles its own at every step (with memory as it is then), so a
-- run's history leaves these out.
ALTER TABLE messages ADD COLUMN IF NOT EXISTS compiled_system boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS messages_conversation ON messages (conversation_id, seq)
    WHERE conversation_id IS NOT NULL;

ALTER TABLE runs ADD COLUMN IF NOT EXISTS conversation_id text;
CREATE INDEX IF NOT EXISTS runs_conversation ON runs (conversation_id, created_at)
    WHERE conversation_id IS NOT NULL;

-- A fork's inherited messages: the same messages (shared ids) in the fork's
-- context, at their original positions, with the fork's own in_context flag.
CREATE TABLE IF NOT EXISTS conversation_messages (
    conversation_id text NOT NULL,
    message_id      text NOT NULL,
    seq             bigint NOT NULL,
    in_context      boolean NOT NULL DEFAULT true,
    PRIMARY KEY (conversation_id, message_id)
);
CREATE INDEX IF NOT EXISTS conversation_messages_seq ON conversation_messages (conversation_id, seq);

-- A tool call waits for its answer in the conversation that asked it.
ALTER TABLE pending_approvals ADD COLUMN IF NOT EXISTS conversation_id text;

-- A conversation's own blocks (copies of the agent's, by label).
ALTER TABLE conversations ADD COLUMN IF NOT EXISTS isolated_block_ids text[] NOT NULL DEFAULT '{}';

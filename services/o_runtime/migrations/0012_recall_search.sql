-- conversation_search: full-text over message content (executor's "messages").
CREATE INDEX IF NOT EXISTS messages_content_tsv ON messages
    USING gin (to_tsvector('english', coalesce(body->>'content', '')));

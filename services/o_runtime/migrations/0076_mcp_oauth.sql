-- OAuth sign-ins to MCP servers (projection "mcp_servers", docs/mcp.md). The tokens and the
-- client's registration are Fernet ciphertext only; the state is kept as its SHA-256 digest.
CREATE TABLE IF NOT EXISTS mcp_oauth_sessions (
    id               text PRIMARY KEY,
    server_url       text NOT NULL,
    server_name      text NOT NULL,
    state_digest     text NOT NULL,
    redirect_uri     text NOT NULL,
    -- pending (sent to sign in), called_back (the browser came back), authorized, failed
    status           text NOT NULL,
    encrypted_tokens text,
    expires_at       timestamptz,
    scope            text,
    encrypted_client text,
    oauth_metadata   jsonb,
    error            text,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    last_seq         bigint NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS mcp_oauth_sessions_state ON mcp_oauth_sessions (state_digest);
-- A server's calls use the newest authorized sign-in to its address (as Letta does).
CREATE INDEX IF NOT EXISTS mcp_oauth_sessions_url ON mcp_oauth_sessions (server_url, updated_at);

-- Gateway's projection of the MCP server registry (projection "mcp_servers", issue 15).
-- Secrets (auth token, header values, stdio env values) are Fernet ciphertext only.
CREATE TABLE IF NOT EXISTS mcp_servers (
    id                       text PRIMARY KEY,
    server_name              text NOT NULL,
    server_type              text NOT NULL,
    command                  text,
    args                     text[] NOT NULL DEFAULT '{}',
    server_url               text,
    auth_header              text,
    encrypted_auth_token     text,
    encrypted_custom_headers jsonb,
    encrypted_env            jsonb,
    created_at               timestamptz NOT NULL,
    updated_at               timestamptz NOT NULL,
    last_seq                 bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS mcp_servers_name ON mcp_servers (server_name);
CREATE INDEX IF NOT EXISTS mcp_servers_created ON mcp_servers (created_at, id);

-- The tools each server offered at its last sync, in the order it listed them.
CREATE TABLE IF NOT EXISTS mcp_tools (
    id            text PRIMARY KEY,
    mcp_server_id text NOT NULL,
    position      integer NOT NULL,
    name          text NOT NULL,
    description   text,
    json_schema   jsonb NOT NULL,
    created_at    timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS mcp_tools_server ON mcp_tools (mcp_server_id, position);

-- Sandbox configurations (projection "sandbox_configs", the gateway's;
-- events/sandbox_configs.py): one per type, and its environment variables (values are Fernet
-- ciphertext; the executor hands them to the sandbox as it does an agent's secrets).
CREATE TABLE IF NOT EXISTS sandbox_configs (
    id           text PRIMARY KEY,
    sandbox_type text NOT NULL,
    config       jsonb NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    last_seq     bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS sandbox_configs_type ON sandbox_configs (sandbox_type);
CREATE TABLE IF NOT EXISTS sandbox_env_vars (
    id                text PRIMARY KEY,
    sandbox_config_id text NOT NULL,
    key               text NOT NULL,
    encrypted_value   text NOT NULL,
    description       text,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS sandbox_env_vars_config ON sandbox_env_vars (sandbox_config_id, created_at, id);

-- Model providers registered through the API (projection "providers", the gateway's;
-- Letta's bring-your-own-key providers). The key is the event's ciphertext.
CREATE TABLE IF NOT EXISTS providers (
    id                text PRIMARY KEY,
    name              text NOT NULL,
    provider_type     text NOT NULL,
    base_url          text,
    encrypted_api_key text,
    region            text,
    api_version       text,
    models            text[] NOT NULL DEFAULT '{}',
    embedding_models  text[] NOT NULL DEFAULT '{}',
    last_synced       timestamptz,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    last_seq          bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS providers_created ON providers (created_at, id);
CREATE INDEX IF NOT EXISTS providers_name ON providers (name);

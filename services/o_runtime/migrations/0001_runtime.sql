-- Shared by every projector: where each projection stands in the event stream.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE IF NOT EXISTS projection_checkpoints (
    projection text PRIMARY KEY,
    last_seq   bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);

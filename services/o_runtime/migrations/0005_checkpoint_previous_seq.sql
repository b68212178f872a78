-- Where the checkpoint stood before the latest batch claimed it: a projector
-- advances the checkpoint and learns which of its events are new in one
-- statement (projector.py, _CLAIM).
ALTER TABLE projection_checkpoints ADD COLUMN IF NOT EXISTS previous_seq bigint NOT NULL DEFAULT 0;

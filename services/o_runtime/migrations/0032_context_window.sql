-- Issue 3: messages summarized out of the context window stay in recall (projection "runs").
ALTER TABLE messages ADD COLUMN IF NOT EXISTS in_context boolean NOT NULL DEFAULT true;

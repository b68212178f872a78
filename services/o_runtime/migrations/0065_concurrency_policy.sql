-- Issue 22 point 2: a message that arrives while a run is in flight (docs/conversations.md).
-- The agent's default policy (projection "agents"); NULL or '': the route's (Letta's).
ALTER TABLE agents ADD COLUMN IF NOT EXISTS concurrency text;
-- A run interrupted by a later one (RunQueued.interrupts), and whether that one rolls it
-- back (projection "runs"); the rolling-back run finds what to roll back by this index.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS interrupted_by text;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS rolled_back boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS runs_interrupted_by ON runs (interrupted_by)
    WHERE interrupted_by IS NOT NULL;
-- A rolled-back run's messages (RunRolledBack): out of the context and of listings; the
-- run's own messages route still shows them.
ALTER TABLE messages ADD COLUMN IF NOT EXISTS rolled_back boolean NOT NULL DEFAULT false;

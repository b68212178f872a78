-- Issue 10: a command whose work is done is answered from the record, never done again.
-- Where a run's own events begin on its agent's subject (its RunStarted): a
-- StartRun delivered again reads the run's recorded facts from there.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS started_seq bigint;
-- The command that made each block version (its event's causation id): a
-- memory command delivered again finds the version it made.
ALTER TABLE block_versions ADD COLUMN IF NOT EXISTS command_id text;
CREATE INDEX IF NOT EXISTS block_versions_command ON block_versions (command_id)
    WHERE command_id IS NOT NULL;

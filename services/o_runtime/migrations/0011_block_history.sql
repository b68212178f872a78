-- Block history as the versions endpoint shows it: which tool made a version,
-- and which earlier version a restore brought back.
ALTER TABLE block_versions ADD COLUMN IF NOT EXISTS tool_name text;
ALTER TABLE block_versions ADD COLUMN IF NOT EXISTS restored_from integer;

-- An agent's last stop reason is read from the runs projection (routes/agents.last_run);
-- the agents projection no longer copies it on every RunCompleted.
ALTER TABLE agents DROP COLUMN IF EXISTS last_stop_reason;

-- Each decision's event id (its envelope's): a rollback delivered again, however late, finds
-- its own decision by it (derived from its command's id) and is answered, not made again.
ALTER TABLE evolution_history ADD COLUMN IF NOT EXISTS event_id text;
CREATE INDEX IF NOT EXISTS evolution_history_event ON evolution_history (agent_id, event_id);

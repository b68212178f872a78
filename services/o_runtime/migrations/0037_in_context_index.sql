-- Issue 10: every run reads its agent's in-context history. With only
-- (agent_id, seq) to go on, Postgres read every message the agent ever had and
-- dropped the evicted ones (20,000 rows for 150 in context: 2.5-4 ms, growing
-- with the conversation). Summaries keep what is in context bounded; this
-- index makes the read follow them.
CREATE INDEX IF NOT EXISTS messages_in_context ON messages (agent_id, seq) WHERE in_context;

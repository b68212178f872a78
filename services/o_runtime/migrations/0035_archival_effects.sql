-- Issue 10: which memory command made each archival event (its causation id),
-- so an archival command delivered again is answered from the record
-- (projection "archival"; an insert is not rated or embedded again).
CREATE TABLE IF NOT EXISTS archival_effects (
    command_id text PRIMARY KEY,
    agent_id   text NOT NULL,
    seq        bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS archival_effects_agent ON archival_effects (agent_id);

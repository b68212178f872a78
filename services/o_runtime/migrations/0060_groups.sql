-- Issue 13: multi-agent groups (projection "groups", the gateway's) and the
-- sleep-time turns of their managers (projection "runs": the turn events are on
-- the manager agent's subject, beside the runs they count).
CREATE TABLE IF NOT EXISTS groups (
    id                        text PRIMARY KEY,
    manager_type              text NOT NULL,
    agent_ids                 text[] NOT NULL DEFAULT '{}',
    description               text NOT NULL DEFAULT '',
    manager_agent_id          text,
    sleeptime_agent_frequency integer,
    max_turns                 integer,
    termination_token         text,
    hidden                    boolean,
    managed                   boolean NOT NULL DEFAULT false,
    created_at                timestamptz NOT NULL,
    updated_at                timestamptz NOT NULL,
    last_seq                  bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS groups_created ON groups (created_at, id);
CREATE INDEX IF NOT EXISTS groups_manager ON groups (manager_agent_id) WHERE manager_agent_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS groups_agents ON groups USING gin (agent_ids);

-- One row per counted turn of a sleep-time group's manager.
CREATE TABLE IF NOT EXISTS sleeptime_turns (
    run_id                    text PRIMARY KEY,
    group_id                  text NOT NULL,
    agent_id                  text NOT NULL,
    turns_counter             integer NOT NULL,
    started                   jsonb NOT NULL DEFAULT '[]',
    after_message_id          text,
    last_processed_message_id text,
    skipped                   text,
    created_at                timestamptz NOT NULL,
    seq                       bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS sleeptime_turns_group ON sleeptime_turns (group_id, seq);

ALTER TABLE agents ADD COLUMN IF NOT EXISTS enable_sleeptime boolean;

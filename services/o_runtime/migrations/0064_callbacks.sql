-- Issue 22: completion callbacks (docs/callbacks.md).
-- Where a run's outcome goes when it ends (projection "runs": RunQueued, RunStarted).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS callback_url text;

-- The gateway's projection "callbacks" of o.evt.callback.<run_id>: one delivery per run,
-- what Letta's Run shows of it (callback_sent_at, callback_status_code, callback_error)
-- and where it stands.
CREATE TABLE IF NOT EXISTS run_callbacks (
    run_id               text PRIMARY KEY,
    agent_id             text NOT NULL,
    delivery_id          text NOT NULL,
    url                  text NOT NULL,
    -- scheduled (attempts go on), delivered (a 2xx) or abandoned (refused, or out of time)
    state                text NOT NULL,
    attempts             integer NOT NULL DEFAULT 0,
    deadline             timestamptz NOT NULL,
    next_attempt_at      timestamptz,
    -- The last attempt's time, status (None: no answer) and error (Letta's three fields).
    callback_sent_at     timestamptz,
    callback_status_code integer,
    callback_error       text,
    scheduled_at         timestamptz NOT NULL,
    last_seq             bigint NOT NULL
);

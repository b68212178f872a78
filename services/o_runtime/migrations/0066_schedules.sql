-- Issue 22 point 3: scheduled runs (projection "schedules", o_schedules/projection.py).

-- Each schedule as its subject's events leave it. `after`: its slots up to this instant
-- are spent; `next_due_at`: its first slot after that (NULL: none, a one-shot done).
-- `last_seq`: the schedule subject's last event applied here, which the timer compares
-- with the log before it decides on the row (o_schedules/timer.py).
CREATE TABLE IF NOT EXISTS schedules (
    id           text PRIMARY KEY,
    agent_id     text NOT NULL,
    spec         jsonb NOT NULL,
    enabled      boolean NOT NULL,
    after        timestamptz NOT NULL,
    next_due_at  timestamptz,
    fires        bigint NOT NULL DEFAULT 0,
    skipped      bigint NOT NULL DEFAULT 0,
    last_slot    timestamptz,
    last_run_id  text,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    last_seq     bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS schedules_agent ON schedules (agent_id, created_at);
-- What the timer asks every tick: the enabled schedules whose next slot has come.
CREATE INDEX IF NOT EXISTS schedules_due ON schedules (next_due_at)
    WHERE enabled AND next_due_at IS NOT NULL;

-- Every fired slot and the run it started.
CREATE TABLE IF NOT EXISTS schedule_fires (
    schedule_id  text NOT NULL,
    slot         timestamptz NOT NULL,
    run_id       text NOT NULL,
    agent_id     text NOT NULL,
    late         boolean NOT NULL,
    fired_at     timestamptz NOT NULL,
    seq          bigint NOT NULL,
    PRIMARY KEY (schedule_id, slot)
);

-- The UpdateSchedule commands each schedule has taken (the causation id of its
-- ScheduleUpdated): a command delivered again is answered from here, not applied again.
CREATE TABLE IF NOT EXISTS schedule_commands (
    command_id   text PRIMARY KEY,
    schedule_id  text NOT NULL,
    seq          bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS schedule_commands_schedule ON schedule_commands (schedule_id);

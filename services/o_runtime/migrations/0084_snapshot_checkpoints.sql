-- Each agent's snapshot folds as of its last evaluation's first case (the evolution
-- service's; o_evolution/checkpoints.py): its next evaluation, in this process or after a
-- restart, reads the log on from there. A cache, not a projection: no event makes a row,
-- a rebuild leaves it, and a row lost or unreadable costs one evaluation a fold of the
-- agent's whole history. `event_id` is the id of the event at `seq`: a row whose event is
-- not there (a log reset or restored apart from Postgres) is not used.
CREATE TABLE IF NOT EXISTS snapshot_checkpoints (
    agent_id    text PRIMARY KEY,
    seq         bigint NOT NULL,
    event_id    text NOT NULL,
    format      integer NOT NULL,
    folds       bytea NOT NULL,
    written_at  timestamptz NOT NULL DEFAULT now()
);

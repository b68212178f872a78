-- Issue 10: every run's prompt shows the archive's size and tags. Counted from
-- `passages` each time, that read grew with the archive; the archival
-- projection keeps the figures instead (projection "archival").
CREATE TABLE IF NOT EXISTS archival_counts (
    agent_id text PRIMARY KEY,
    passages integer NOT NULL
);
CREATE TABLE IF NOT EXISTS archival_tag_counts (
    agent_id text NOT NULL,
    tag      text NOT NULL,
    passages integer NOT NULL,
    PRIMARY KEY (agent_id, tag)
);
INSERT INTO archival_counts (agent_id, passages)
    SELECT agent_id, count(*) FROM passages GROUP BY agent_id
    ON CONFLICT DO NOTHING;
INSERT INTO archival_tag_counts (agent_id, tag, passages)
    SELECT agent_id, t, count(*) FROM passages, unnest(tags) AS t GROUP BY agent_id, t
    ON CONFLICT DO NOTHING;

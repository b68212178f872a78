-- A projector's claim that fails loudly (o_runtime/deferred_writes.py). A follower that
-- knows where it left its checkpoint sends its whole transaction as one message: BEGIN, this
-- claim, the handlers' statements, COMMIT. Postgres runs such a message's statements in order
-- and stops at the first error, so the claim raises when the checkpoint is no longer at
-- `expected` (another follower or a rebuild moved it) and nothing after it runs; the
-- follower rolls back and claims the slow way. The error names the table, which is how the
-- follower tells it from a handler's.
CREATE OR REPLACE FUNCTION o_claim_checkpoint(
    p_projection text, p_expected bigint, p_through bigint, p_channel text
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE projection_checkpoints
       SET previous_seq = last_seq, last_seq = p_through, updated_at = now()
     WHERE projection = p_projection AND last_seq = p_expected;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'projection % is no longer at %', p_projection, p_expected
            USING TABLE = 'projection_checkpoints';
    END IF;
    -- Delivered only if the transaction commits.
    PERFORM pg_notify(p_channel, p_projection || ':' || p_through);
END
$$;

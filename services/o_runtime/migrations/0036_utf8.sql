-- Issue 10: block events carry the span of the value that changed, and the
-- memory projection applies it by character position (left/substr). In a
-- UTF8 database characters are Unicode code points, as in the memory
-- service's Python; in another encoding positions would disagree.
DO $$
BEGIN
    IF current_setting('server_encoding') <> 'UTF8' THEN
        RAISE EXCEPTION 'O needs a database in UTF8 encoding (this one is %)',
            current_setting('server_encoding');
    END IF;
END
$$;

-- Memory service's projection of archival memory (projection "archival").
-- Vectors of different embedders have different sizes, so `embedding` is an
-- unsized vector with `dim` beside it; each common size gets its own partial
-- HNSW index over a cast expression, which queries repeat literally.
CREATE TABLE IF NOT EXISTS passages (
    id               text PRIMARY KEY,
    agent_id         text NOT NULL,
    text             text NOT NULL,
    tags             text[] NOT NULL DEFAULT '{}',
    importance       smallint NOT NULL,
    importance_source text NOT NULL,
    kind             text NOT NULL DEFAULT 'memory',
    sources          text[] NOT NULL DEFAULT '{}',
    embedding_model  text NOT NULL,
    dim              integer NOT NULL,
    embedding        vector NOT NULL,
    tsv              tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
    created_at       timestamptz NOT NULL,
    last_accessed_at timestamptz NOT NULL,
    -- Memories already summarised by a reflection (MemoriesReflected).
    reflected        boolean NOT NULL DEFAULT false,
    seq              bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS passages_agent_created ON passages (agent_id, created_at, id);
CREATE INDEX IF NOT EXISTS passages_tsv ON passages USING gin (tsv);
CREATE INDEX IF NOT EXISTS passages_tags ON passages USING gin (tags);
CREATE INDEX IF NOT EXISTS passages_hnsw_384 ON passages
    USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE dim = 384;
CREATE INDEX IF NOT EXISTS passages_hnsw_1536 ON passages
    USING hnsw ((embedding::vector(1536)) vector_cosine_ops) WHERE dim = 1536;

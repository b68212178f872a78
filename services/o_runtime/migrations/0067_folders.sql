-- Memory service's projection of folders and their files (projection "folders", issue 15).
CREATE TABLE IF NOT EXISTS folders (
    id               text PRIMARY KEY,
    name             text NOT NULL,
    description      text,
    instructions     text,
    metadata         jsonb,
    embedding_config jsonb NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    -- The folder subject's last event applied (uploads and deletions of its files too).
    last_seq         bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS folders_created ON folders (created_at, id);
CREATE INDEX IF NOT EXISTS folders_name ON folders (name);

-- One uploaded file and how far its processing got.
CREATE TABLE IF NOT EXISTS folder_files (
    id                 text PRIMARY KEY,
    folder_id          text NOT NULL,
    file_name          text NOT NULL,
    original_file_name text NOT NULL,
    file_type          text NOT NULL,
    file_size          bigint NOT NULL,
    sha256             text NOT NULL,
    -- pending, parsing, embedding, completed, error (Letta's FileProcessingStatus).
    status             text NOT NULL,
    error_message      text,
    total_chunks       integer,
    chunks_embedded    integer,
    pages              integer,
    chars              integer,
    text_sha256        text,
    embedding_model    text,
    chunk_ends         integer[],
    -- The whole text, joined from the chunks once all are embedded.
    content            text,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    -- The file subject's last event applied (0: none yet).
    file_seq           bigint NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS folder_files_folder ON folder_files (folder_id, created_at, id);
CREATE INDEX IF NOT EXISTS folder_files_name ON folder_files (folder_id, original_file_name);

-- Chunks with their embeddings; as passages (0010_archival.sql), vectors of each common
-- size get a partial HNSW index over a cast expression that queries repeat literally.
CREATE TABLE IF NOT EXISTS folder_file_chunks (
    id              text PRIMARY KEY,
    file_id         text NOT NULL,
    folder_id       text NOT NULL,
    idx             integer NOT NULL,
    text            text NOT NULL,
    embedding_model text NOT NULL,
    dim             integer NOT NULL,
    embedding       vector NOT NULL
);
CREATE INDEX IF NOT EXISTS folder_file_chunks_file ON folder_file_chunks (file_id, idx);
CREATE INDEX IF NOT EXISTS folder_file_chunks_folder ON folder_file_chunks (folder_id);
CREATE INDEX IF NOT EXISTS folder_file_chunks_hnsw_384 ON folder_file_chunks
    USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE dim = 384;
CREATE INDEX IF NOT EXISTS folder_file_chunks_hnsw_1536 ON folder_file_chunks
    USING hnsw ((embedding::vector(1536)) vector_cosine_ops) WHERE dim = 1536;

-- Which folders each agent has, in the order they were attached.
CREATE TABLE IF NOT EXISTS agent_folders (
    agent_id     text NOT NULL,
    folder_id    text NOT NULL,
    attached_at  timestamptz NOT NULL,
    attached_seq bigint NOT NULL,
    PRIMARY KEY (agent_id, folder_id)
);
CREATE INDEX IF NOT EXISTS agent_folders_folder ON agent_folders (folder_id);

-- An agent's open files and the window of each; a file of its folders without a row is
-- closed. visible_content is the window as computed from the file's text when opened.
CREATE TABLE IF NOT EXISTS agent_file_views (
    agent_id        text NOT NULL,
    file_id         text NOT NULL,
    folder_id       text NOT NULL,
    start_line      integer,
    end_line        integer,
    visible_content text NOT NULL,
    opened_at       timestamptz NOT NULL,
    opened_seq      bigint NOT NULL,
    PRIMARY KEY (agent_id, file_id)
);
CREATE INDEX IF NOT EXISTS agent_file_views_file ON agent_file_views (file_id);

-- Which command made which event on an agent's file views: a command delivered again
-- finds its outcome here.
CREATE TABLE IF NOT EXISTS agent_file_effects (
    command_id text PRIMARY KEY,
    agent_id   text NOT NULL,
    seq        bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS agent_file_effects_agent ON agent_file_effects (agent_id);

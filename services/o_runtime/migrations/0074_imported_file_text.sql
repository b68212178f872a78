-- A file imported from an agent file arrives as its text (FileUploaded.parsed_text): the
-- worker reads it as text whatever its type says (issue 15, agent files with folders).
ALTER TABLE folder_files ADD COLUMN IF NOT EXISTS parsed_text boolean NOT NULL DEFAULT false;

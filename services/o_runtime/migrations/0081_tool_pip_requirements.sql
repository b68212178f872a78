-- The packages a user's tool imports (ToolCreated.pip_requirements): the executor sends them
-- with each RunTool, and the sandbox installs them (docs/sandbox.md, "Packages").
ALTER TABLE tools ADD COLUMN IF NOT EXISTS pip_requirements jsonb NOT NULL DEFAULT '[]';

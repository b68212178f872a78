"""Agent files (`.af`, Letta's AgentFileSchema): export an agent, import a file.

- `schema.py`: the file's shape as O reads it (Letta's fields, bounded).
- `letta_messages.py`: Letta's stored messages to O's ChatMessage and back.
- `plan.py`: a checked file and the import options to what will be written
  (pure: a hostile file is refused here, before anything exists), with
  `tools_plan.py`, `mcp_plan.py` (MCP servers registered from the file) and
  `folders_plan.py` (folders, and their files as uploads of their text).
- `importer.py`: the plan written through O's usual commands and events.
- `exporter.py`: an agent (and the companions and group it manages) to a file, its
  folders and files by `folders_export.py`.

docs/agent-files.md says what is carried over, what is left out and why.
"""

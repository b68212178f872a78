"""Folders' files in the memory service: parsing, chunking and embedding uploads (a
durable worker), the agents' file views (open and closed files, their windows), and
the file tools' searches. See docs/folders.md."""

"""Running O on one machine without Docker: the supervisor behind `make run` (supervisor.py),
NATS and Postgres from PyPI wheels (embedded.py), and replaying projections from the log
(rebuild.py, `make rebuild`). Apart from the runtime framework (o_runtime), which every
service runs on in any deployment."""

"""The shadow runner: the agent loop on a snapshot taken from the log, every write kept in an
overlay that is thrown away, nothing published (snapshot.py, deps.py, runner.py)."""

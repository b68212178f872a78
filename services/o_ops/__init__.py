"""The operator's command line, `python -m o_ops` (docs/operations.md): the system's status,
dead letters and their redrive, projections rebuilt and verified, agent files, backup and
restore of the log. One module per command group; what they decide is apart from the I/O.

`system_status.py` is also what the gateway's `GET /v1/operations/status` answers (the
console's health page), so the CLI and the page show the same facts.
"""

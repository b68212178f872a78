"""Letta's multi-agent tools: one agent messaging others (o_contracts.base_tools).

A message to another agent is a `StartRun` on that agent's lane, like any other
run: its id derives from the calling run, the tool call and the other agent, so
a resumed caller finds the run it started instead of starting a second one.
`messages.py` says what is sent and what comes back (pure); `runs.py` starts the
other agent's run and waits for its end; `tools.py` is the three tools.
"""

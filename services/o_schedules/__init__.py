"""Scheduled runs (issue 22, O's extension): an agent that wakes at 7:00 in its user's time
zone, or once in an hour, without a client polling. docs/schedules.md.

- `slots.py`, `plan.py`: when a schedule fires and what becomes of missed slots (pure).
- `projection.py`: the read model (projection "schedules"): each schedule, its next slot.
- `commands.py`: create, change and delete schedules (commands on `o.cmd.schedule.*`).
- `timer.py`: fires due slots; exactly once by the log, whatever the replicas.
- `dispatch.py`: a fired slot becomes an ordinary run.
- `component.py`: all of it, hosted by a service process (the evolution service's).
"""

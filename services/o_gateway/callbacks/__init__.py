"""Completion callbacks (Letta's `callback_url`, issue 22): when a run that asked for one
ends, its outcome is POSTed to the caller's URL, signed, retried with backoff for a
bounded time, every attempt recorded in the log (docs/callbacks.md). The executor asks for
the delivery as the run ends (`DeliverCallback`, o_executor/live/execution.py).

| module | what |
|---|---|
| `settings.py` | the operator's settings (secret, allowed targets, timeouts, backoff) |
| (`o_runtime/egress_policy.py`) | which addresses a callback may reach (no SSRF through O) |
| `signing.py` | the signature headers, and how a receiver checks them |
| `payload.py` | the body: Letta's shape, from the run and its messages |
| `schedule.py` | the delivery's state folded from its events, and what comes next |
| `sender.py` | one POST: resolve, check every address, connect to a checked one, bounded |
| `deliveries.py` | the `DeliverCallback` handler: one attempt at a time, recorded |
| `projection.py` | projection "callbacks": what a run shows of its callback |
"""

"""A message delivered to this process over TLS comes in one TLS record, not two.

nats-server queues what it sends a client in pooled buffers: a delivery's control line
(`MSG`/`HMSG <subject> <sid> [reply] ...`) goes into a 512-byte buffer when nothing else is
queued for the client, and what does not fit goes on into 64 KiB buffers. It then writes the
buffers with one `writev`, but over TLS Go's `tls.Conn` has no `writev`: each buffer is a
record of its own, with a write call of its own. So every delivery of more than 512 bytes (a
command, an event: ~1.2 KB) crossed as two records and two TCP segments, and its receiver could
be woken for each. With a control line longer than 512 bytes, nats-server starts the queue in a
64 KiB buffer and the whole flush is one record (`tests/integration/test_nats_tls_records.py`
counts them on a real nats-server).

The line's one part a client chooses is the subscription id, which nats-py numbers from the
connection's counter: starting the counter at 10**(SID_DIGITS - 1) makes every id of the
connection SID_DIGITS digits long, whatever the subject. The price is parsing that number in
each delivery (~2.5 us in CPython); what it saves is a TLS record at each end and a write call
in nats-server for each delivery over 512 bytes (with TLS on, nats-server spent 0.15-0.35 ms
less CPU a 1-step run: bench/README.md, "The thirty-third session"). Plain TCP connections keep
short ids: there `writev` sends the buffers as one segment anyway. Applied to a service's two
connections (its event log's, o_runtime/eventlog.py, and its FastStream broker's,
o_runtime/service.py), each before it subscribes.
"""

from __future__ import annotations

from nats.aio.client import Client as NATS

# 5 ("HMSG ") + 1-character subject + separators + sizes: a line this long with the shortest
# subject and no reply is still over 512 bytes.
SID_DIGITS = 508
_FIRST_SID = 10 ** (SID_DIGITS - 1)


def deliveries_in_one_record(nc: NATS) -> None:
    """Number `nc`'s subscriptions from now on with SID_DIGITS-digit ids (nats-py 2.16's
    counter, `_sid`: its subscribe adds one and uses the sum). Call before any subscription is
    made on it: the ids of earlier ones stay short."""
    nc._sid = max(nc._sid, _FIRST_SID)

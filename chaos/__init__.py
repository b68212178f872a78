"""The chaos suite: sustained load on a whole O system while its processes are SIGKILLed.

`python -m chaos` (`make chaos`) starts O the way `make run` does, in a temporary data folder on
free ports, with a scripted LLM of its own (`chaos.llm`); clients send messages (some editing a
memory block, some through `/messages/async`), each with a unique token and retried with the
same idempotency key, while `chaos.killer` kills services, nats-server, the Postgres postmaster
and single Postgres backends on a schedule derived from the seed. Afterwards `chaos.checks`
verifies every acknowledged request exactly once and `chaos.snapshot` compares the API's whole
view before and after a full projection rebuild. `tests/chaos/` runs a short form in CI.

Modules, one job each: `llm` (the scripted OpenAI-protocol server), `system` (start, inspect and
stop the system under test), `load` (the clients), `killer` (the kill schedule), `api` (retried,
paginated reads), `checks` (exactly-once verdicts), `blocklog` (a block's events from JetStream,
for diagnoses), `snapshot` (API view, rebuild, diff), `report` (what is printed), `harness` (the
whole run), `__main__` (the command line).
"""

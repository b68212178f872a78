"""How many memory commands are handled at once, and how many of those may wait on a model
or an embedder (o_runtime/handler_share.py says why the second bound)."""

# Handlers of one memory process.
MEMORY_HANDLERS = 16
# Of them, those that may be rating, reflecting or embedding at once: the others stay for
# memory edits, which runs wait for.
SLOW_HANDLERS = MEMORY_HANDLERS // 2
# Commands in the consumer's hands at once across replicas, most of them slow work waiting
# for its share in the stream (JetStream counts a deferred command as pending). Its durable
# is made with it (o_setup/topology.py).
MAX_PENDING_COMMANDS = 1_000

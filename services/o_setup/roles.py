"""Who may do what on O's NATS: one role per service, the setup role, the operator, and
outside publishers.

Each role is a list of grants built from the names in `o_contracts/subjects.py` and the
durable consumers in `o_setup/topology.py`, so a new subject is granted here in one line
(and `tests/unit/test_nats_roles.py` fails until a service's subjects are granted). The
server enforces the result (server_config.py renders it into nats-server's
`authorization` block); docs/security.md says why each role holds what it holds.

What JetStream needs besides the subjects themselves (nats-server 2.15):

- appending is a plain publish on the event's subject; the stream's acknowledgement comes
  back on the publisher's inbox;
- reading the log takes the JetStream API on O_EVENTS: stream info, direct and stored
  message gets, and ephemeral (ordered) consumers, whose flow-control requests are
  answered on `$JS.FC.<stream>.>`;
- a durable consumer is made by the setup role; its service only reads its state, pulls
  (`CONSUMER.MSG.NEXT`) and acknowledges (`$JS.ACK.<stream>.<name>.>`);
- a KV bucket or an object store is a stream of its own (`KV_<bucket>`, `OBJ_<bucket>`)
  written on `$KV.<bucket>.>` / `$O.<bucket>.>`;
- taking over what a dead process held (o_runtime/takeover.py) is a nak on the consumer's
  ack subjects (already its own), a request on the holder's liveness subject, and the
  consumer's keys of the `o_held` bucket.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from o_contracts import subjects
from o_contracts.requests import GENERATE_WITHIN
from o_runtime.holdings import HELD_BUCKET
from o_runtime.nats_identity import inbox_prefix
from o_runtime.refusals import REFUSED_BUCKET
from o_setup import topology

JS_API = "$JS.API"
# Commands from outside: what other systems may publish (contracts/README.md).
PUBLIC_COMMANDS = (
    subjects.EXECUTOR_COMMANDS,
    subjects.MEMORY_COMMANDS,
    subjects.SCHEDULE_COMMANDS,
)


@dataclass(frozen=True)
class Grant:
    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    # May answer requests on their reply subjects, up to this many answers to a request
    # (nats-server's allow_responses; 0: none),
    responds: int = 0
    # within this many seconds of the request (0: nats-server's default, two minutes).
    responds_within: float = 0.0

    def __add__(self, other: Grant) -> Grant:
        return Grant(
            _union(self.publish, other.publish),
            _union(self.subscribe, other.subscribe),
            max(self.responds, other.responds),
            max(self.responds_within, other.responds_within),
        )


def _union(a: Iterable[str], b: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*a, *b]))


def grants(*parts: Grant) -> Grant:
    out = Grant()
    for part in parts:
        out = out + part
    return out


@dataclass(frozen=True)
class Role:
    name: str
    grant: Grant
    # One line for the generated server configuration.
    about: str


# -- grants -----------------------------------------------------------------------------


def inbox(role: str) -> Grant:
    """Replies (to requests, to stream publishes, consumers' deliveries) on its own inboxes."""
    return Grant(subscribe=(f"{inbox_prefix(role)}.>",))


def appends(*event_subjects: str) -> Grant:
    """Append events on these subjects (the stream acknowledges on the inbox)."""
    return Grant(publish=event_subjects)


def sends(*command_subjects: str) -> Grant:
    return Grant(publish=command_subjects)


def gets(stream: str) -> Grant:
    """Read single messages of `stream` (by sequence, or a subject's last or next)."""
    return Grant(
        publish=(
            f"{JS_API}.STREAM.INFO.{stream}",
            f"{JS_API}.STREAM.MSG.GET.{stream}",
            f"{JS_API}.DIRECT.GET.{stream}",
            f"{JS_API}.DIRECT.GET.{stream}.>",
        )
    )


def follows(stream: str) -> Grant:
    """Read `stream` through ordered (ephemeral) consumers.

    Only for O_EVENTS, whose messages are events O's services appended: whoever may make
    a consumer can have it deliver to any subject (nats-server does not check the deliver
    subject against its maker's permissions), so no identity may make consumers on a
    stream holding bytes from outside (commands, dead letters, images).
    """
    return Grant(
        publish=(
            f"{JS_API}.CONSUMER.CREATE.{stream}",
            f"{JS_API}.CONSUMER.CREATE.{stream}.>",
            f"{JS_API}.CONSUMER.INFO.{stream}.*",
            f"{JS_API}.CONSUMER.DELETE.{stream}.*",
            f"$JS.FC.{stream}.>",
        )
    )


def reads_log() -> Grant:
    """The events stream, also as it happens (core NATS subscriptions on event subjects)."""
    return (
        gets(subjects.EVENTS_STREAM)
        + follows(subjects.EVENTS_STREAM)
        + Grant(subscribe=(subjects.ALL_EVENTS,))
    )


def consumes(durable: topology.Durable) -> Grant:
    """Pull from and acknowledge on a durable consumer the setup role made."""
    stream, name = durable.stream, durable.name
    return Grant(
        publish=(
            f"{JS_API}.CONSUMER.INFO.{stream}.{name}",
            f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.{name}",
            f"$JS.ACK.{stream}.{name}.>",
        )
    )


def holds(durable: topology.Durable) -> Grant:
    """Keep what it holds of `durable` in the holdings bucket, follow its other holders
    there, and take over what a dead one held (o_runtime/holdings.py, takeover.py)."""
    keys = f"$KV.{HELD_BUCKET}.{durable.name}.>"
    return gets(f"KV_{HELD_BUCKET}") + Grant(publish=(keys,), subscribe=(keys,))


def refuses(durable: topology.Durable) -> Grant:
    """Keep the refusals it answered, for their commands' redeliveries
    (o_runtime/refusals.py)."""
    keys = f"$KV.{REFUSED_BUCKET}.{durable.name}.>"
    return gets(f"KV_{REFUSED_BUCKET}") + Grant(publish=(keys,))


def handles_commands(*durables: topology.Durable) -> Grant:
    """Consume commands and answer their senders (O-Reply-To names any role's inbox);
    give back at once what a dead replica held; answer a redelivered refusal as before."""
    return grants(*(consumes(d) + holds(d) + refuses(d) for d in durables)) + Grant(
        publish=("_INBOX.>",)
    )


def lives(role: str) -> Grant:
    """Answer "are you there?" on its liveness subjects, and ask its fellow replicas
    (o_runtime/liveness.py)."""
    alive = subjects.alive_subject(role, "*")
    return serves(alive) + asks(alive)


def dead_letters() -> Grant:
    return Grant(publish=(subjects.ALL_DEAD_LETTERS,))


def serves(*rpc_subjects: str, answers: int = 1, within: float = 0.0) -> Grant:
    """Answer requests on these subjects (only on the requests' reply subjects, up to
    `answers` times each, for `within` seconds; 0: nats-server's two minutes)."""
    return Grant(subscribe=rpc_subjects, responds=answers, responds_within=within)


def asks(*rpc_subjects: str) -> Grant:
    return Grant(publish=rpc_subjects)


def projections() -> Grant:
    """Follow projections and ask them to catch up (o.projection.wanted.<name>)."""
    wanted = f"{subjects.PROJECTION_WANTED_PREFIX}.*"
    return Grant(publish=(wanted,), subscribe=(wanted,))


def kv(bucket: str) -> Grant:
    """Get and put keys; hear puts as they happen (core NATS)."""
    return gets(f"KV_{bucket}") + Grant(
        publish=(f"$KV.{bucket}.>",), subscribe=(f"$KV.{bucket}.>",)
    )


def objects(bucket: str, write: bool) -> Grant:
    """Read objects with direct gets (o_runtime/images.py); `write`: put them too."""
    reads = gets(f"OBJ_{bucket}")
    if not write:
        return reads
    # (Content-addressed objects are never overwritten: no purge needed.)
    return reads + Grant(publish=(f"$O.{bucket}.>",))


def service(role: str) -> Grant:
    """What every service but the sandbox does: read the log, follow projections,
    dead-letter what it cannot handle, answer the roll call and whether it lives."""
    return reads_log() + projections() + dead_letters() + answers_roll_call() + lives(role)


def answers_roll_call() -> Grant:
    """Say who it is and whether it is ready (o_runtime/roll_call.py), as every service
    process does, the sandbox too."""
    return serves(subjects.ROLL_CALL)


def watches_the_system() -> Grant:
    """What the status route reads (o_ops/system_status.py, docs/operations.md): the roll
    call, every durable consumer's state, and the next command waiting for one (its age is
    the consumer's lag). Single commands only, never a consumer on O_COMMANDS; the gateway
    sends most commands itself, and reads every projection already."""
    return grants(
        asks(subjects.ROLL_CALL),
        Grant(
            publish=tuple(
                f"{JS_API}.CONSUMER.INFO.{d.stream}.{d.name}" for d in topology.durables()
            )
        ),
        gets(subjects.COMMANDS_STREAM),
    )


# -- roles ------------------------------------------------------------------------------

cmd, evt = topology.commands, topology.events

OPERATOR = Role(
    "operator",
    Grant(publish=(">",), subscribe=(">",)),
    "people and their tools (rebuild, backups, tests): everything",
)
SETUP = Role(
    "setup",
    Grant(publish=(f"{JS_API}.>",)) + inbox("setup"),
    "creates and updates streams, buckets and durable consumers (o_setup)",
)
GATEWAY = Role(
    "gateway",
    grants(
        inbox("gateway"),
        service("gateway"),
        # The agent registry, conversations, groups, tools, MCP servers.
        appends(
            subjects.AGENT_AND_CONVERSATION_EVENTS,
            subjects.GROUP_EVENTS,
            subjects.TOOL_EVENTS,
            subjects.PROVIDER_EVENTS,
            subjects.IDENTITY_EVENTS,
            subjects.SANDBOX_CONFIG_EVENTS,
            # MCP servers and their OAuth sign-ins.
            subjects.MCP_REGISTRY_EVENTS,
        ),
        sends(
            subjects.EXECUTOR_COMMANDS,
            subjects.MEMORY_COMMANDS,
            subjects.EVOLUTION_COMMANDS,
            subjects.SCHEDULE_COMMANDS,
        ),
        # Tools the API runs directly (/v1/tools/run, an agent's tool by name): the
        # execution's record, kept by the caller (o_runtime/sandbox_requests.py).
        appends(subjects.SANDBOX_EVENTS),
        asks(
            subjects.SANDBOX_RUN,
            subjects.SANDBOX_EXECUTIONS,
            subjects.sandbox_alive_subject("*"),
        ),
        # Folders (docs/folders.md): the folder's own events; uploads' bytes first.
        appends(subjects.FILE_UPLOADS),
        objects(subjects.FILES_BUCKET, write=True),
        asks(subjects.MEMORY_SEARCH_FILES),
        # Completion callbacks (docs/callbacks.md): deliveries made and recorded (the
        # executor asks for them).
        appends(subjects.CALLBACK_EVENTS),
        handles_commands(cmd("gateway-callbacks")),
        asks(
            subjects.MEMORY_SEARCH_ARCHIVAL,
            subjects.MEMORY_READ_CORE,
            subjects.EXECUTOR_GENERATE,
            subjects.EXECUTOR_READ_CONTEXT,
            subjects.EXECUTOR_PREVIEW_RUN,
            # (the executor that took a completion, the memory replica that took a search,
            # watched: o_runtime/watched_requests.py)
            subjects.alive_subject("executor", "*"),
            subjects.alive_subject("memory", "*"),
            subjects.SANDBOX_CAPABILITIES,
            # stdio MCP servers run in the sandbox (o_runtime/mcp_stdio_relay.py).
            subjects.SANDBOX_MCP_STDIO,
            # Tools' packages installed ahead of their first call (docs/sandbox.md).
            subjects.SANDBOX_PREPARE,
        ),
        Grant(subscribe=(f"{subjects.RUN_TOKENS_PREFIX}.*",)),
        # The dead-letter counts /metrics shows (o_runtime/sampling.py): the stream's
        # per-subject totals only, no message of it.
        Grant(publish=(f"{JS_API}.STREAM.INFO.{subjects.DEAD_LETTER_STREAM}",)),
        objects(subjects.IMAGES_BUCKET, write=True),
        # Steps' provider traces (GET /v1/steps/{id}/trace), read by key.
        gets(f"KV_{subjects.PROVIDER_TRACES_BUCKET}"),
        # The system's status for operators and the console (GET /v1/operations/status).
        watches_the_system(),
    ),
    "HTTP API: registry events, commands to the services, reads",
)
EXECUTOR = Role(
    "executor",
    grants(
        inbox("executor"),
        service("executor"),
        # Runs (on the agent's and its conversations' subjects) and tool executions.
        appends(subjects.AGENT_AND_CONVERSATION_EVENTS, subjects.SANDBOX_EVENTS),
        # An MCP server's OAuth tokens it had to refresh to call the server (docs/mcp.md).
        appends(subjects.MCP_OAUTH_EVENTS),
        handles_commands(cmd("executor")),
        # Multi-agent runs, memory tools, evolution tools; a run's completion callback.
        sends(
            subjects.EXECUTOR_COMMANDS,
            subjects.MEMORY_COMMANDS,
            subjects.EVOLUTION_COMMANDS,
            subjects.CALLBACK_COMMANDS,
        ),
        # The run queue reads an agent's next command by subject, and takes out of the
        # stream a run's command refused before its turn (o_executor/run_queue.withdraw).
        gets(subjects.COMMANDS_STREAM),
        Grant(publish=(f"{JS_API}.STREAM.MSG.DELETE.{subjects.COMMANDS_STREAM}",)),
        # A memory edit in doubt after a crash: whether the memory service has handled the
        # command sent again (its consumer's ack floor: o_executor/live/tools.py).
        Grant(publish=(f"{JS_API}.CONSUMER.INFO.{subjects.COMMANDS_STREAM}.memory",)),
        serves(
            subjects.EXECUTOR_GENERATE,
            subjects.EXECUTOR_READ_CONTEXT,
            subjects.EXECUTOR_PREVIEW_RUN,
            # A completion is answered twice (who took it, then the answer:
            # o_runtime/watched_answers.py), up to the longest an asker waits.
            answers=2,
            within=GENERATE_WITHIN + 60,
        ),
        asks(
            subjects.MEMORY_READ_CORE,
            subjects.MEMORY_SEARCH_ARCHIVAL,
            subjects.SANDBOX_RUN,
            subjects.SANDBOX_EXECUTIONS,
            subjects.sandbox_alive_subject("*"),
            subjects.SANDBOX_MCP_STDIO,
            subjects.MEMORY_SEARCH_FILES,
            # (the memory replica that took a search, watched: o_runtime/watched_requests.py)
            subjects.alive_subject("memory", "*"),
        ),
        appends(f"{subjects.RUN_TOKENS_PREFIX}.*"),
        kv(topology.RUNS_BUCKET),
        objects(subjects.IMAGES_BUCKET, write=False),
        # Steps' exchanges with their providers (o_executor/provider_traces.py): puts only
        # (plain publishes; the bucket's info to find it at start).
        gets(f"KV_{subjects.PROVIDER_TRACES_BUCKET}"),
        Grant(publish=(f"$KV.{subjects.PROVIDER_TRACES_BUCKET}.>",)),
    ),
    "agent runs: run events, tool executions, commands to memory and evolution",
)
MEMORY = Role(
    "memory",
    grants(
        inbox("memory"),
        service("memory"),
        appends(subjects.BLOCK_EVENTS, subjects.ARCHIVAL_EVENTS, subjects.ARCHIVE_EVENTS),
        handles_commands(cmd("memory")),
        consumes(evt("memory-evolution-archive")),
        # Folders' files: each file's processing (not the folder's own events), agents'
        # open files, the work queue and the parsed text.
        appends(subjects.file_subject("*", "*"), subjects.AGENT_FILES_EVENTS),
        sends(subjects.FILES_COMMANDS),
        handles_commands(cmd("memory-files")),
        consumes(evt("memory-file-uploads")),
        objects(subjects.FILES_BUCKET, write=True),
        sends(subjects.MEMORY_COMMANDS),
        serves(subjects.MEMORY_READ_CORE),
        # Searches are answered twice: who took one, then its results
        # (o_runtime/watched_answers.py).
        serves(subjects.MEMORY_SEARCH_ARCHIVAL, subjects.MEMORY_SEARCH_FILES, answers=2),
        # Memories' importance and reflections, by the agent's model (o_memory/model_calls.py),
        # watching the executor that took the question (o_runtime/watched_requests.py).
        asks(subjects.EXECUTOR_GENERATE, subjects.alive_subject("executor", "*")),
    ),
    "sole writer of blocks and archival memory",
)
EVOLUTION = Role(
    "evolution",
    grants(
        inbox("evolution"),
        service("evolution"),
        appends(subjects.EVOLUTION_EVENTS, subjects.AGENT_AND_CONVERSATION_EVENTS),
        handles_commands(cmd("evolution")),
        consumes(evt("evolution-turns")),
        # Schedules (o_schedules, in this process: docs/schedules.md).
        appends(subjects.SCHEDULE_EVENTS),
        handles_commands(cmd("schedules")),
        consumes(evt("schedule-dispatch")),
        sends(subjects.EVOLUTION_COMMANDS, subjects.EXECUTOR_COMMANDS, subjects.MEMORY_COMMANDS),
        # Shadow work waits while users' runs queue up at the executor.
        Grant(publish=(f"{JS_API}.CONSUMER.INFO.{subjects.COMMANDS_STREAM}.executor",)),
        # Shadow runs read memory and archival search as the executor does.
        asks(subjects.MEMORY_READ_CORE, subjects.MEMORY_SEARCH_ARCHIVAL),
    ),
    "sleep-time turns, proposals, shadow evaluation, rollouts: evolution decisions",
)
# Runs users' code: no JetStream at all, no inbox, nothing to publish; it answers the
# requests it is sent (docs/security.md).
TOOL_SANDBOX = Role(
    "tool_sandbox",
    serves(
        subjects.SANDBOX_EXECUTIONS,
        subjects.SANDBOX_CAPABILITIES,
        subjects.SANDBOX_MCP_STDIO,
        subjects.SANDBOX_PREPARE,
        # (Callers ask it whether it lives while it runs their tool.)
        subjects.sandbox_alive_subject("*"),
    )
    # A run is answered twice: who took it, then its outcome (o_runtime/sandbox_requests.py).
    + serves(subjects.SANDBOX_RUN, answers=2)
    + answers_roll_call(),
    "runs users' tools: answers its own requests, nothing else",
)

SERVICES = (GATEWAY, EXECUTOR, MEMORY, EVOLUTION, TOOL_SANDBOX)
ROLES: dict[str, Role] = {r.name: r for r in (OPERATOR, SETUP, *SERVICES)}


def publisher(name: str, agents: Iterable[str] | None = None) -> Role:
    """An outside system: commands on the public command subjects and their replies.

    With `agents`, only commands keyed by those agents: `o.cmd.executor.<agent>` (runs in
    the agent's default conversation), `o.cmd.memory.<agent>` (its archival memory) and
    `o.cmd.schedule.<agent>` (its schedules).
    Every consumer also refuses a command whose subject and body name different agents
    (o_runtime/admission.py), so the subject is the whole of ownership.
    """
    if agents is None:
        allowed: tuple[str, ...] = PUBLIC_COMMANDS
    else:
        allowed = tuple(
            s
            for agent in agents
            for s in (
                subjects.executor_command_subject(agent),
                subjects.memory_command_subject(agent),
                subjects.schedule_command_subject(agent),
            )
        )
    return Role(
        name,
        sends(*allowed) + inbox(name),
        "outside publisher: public commands"
        + ("" if agents is None else f" for {len(allowed) // 3} agents"),
    )

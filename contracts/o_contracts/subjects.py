"""Stream and subject names: defined here once, used by every service.

Subjects are per aggregate (`o.evt.agent.<agent_id>`), so one aggregate's history
is one filtered replay and appends can use the expected-last-subject-sequence
check for optimistic concurrency.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

EVENTS_STREAM: Final = "O_EVENTS"
COMMANDS_STREAM: Final = "O_COMMANDS"
DEAD_LETTER_STREAM: Final = "O_DEAD_LETTERS"
# The JetStream object store holding images of messages, each named by the SHA-256 of its
# bytes (hex): events carry the name, never the bytes (o_runtime/images.py).
IMAGES_BUCKET: Final = "O_IMAGES"
# The object store holding folders' uploaded files and their parsed text, each named by
# the SHA-256 of its bytes (o_runtime/file_store.py; events/folders.py says why).
FILES_BUCKET: Final = "O_FILES"
# The key-value bucket of each step's exchange with its model provider, by step id, kept
# for a while (o_contracts/provider_traces.py; docs/observability.md).
PROVIDER_TRACES_BUCKET: Final = "O_PROVIDER_TRACES"

EVENTS_PREFIX: Final = "o.evt"
COMMANDS_PREFIX: Final = "o.cmd"
DEAD_LETTER_PREFIX: Final = "o.dlq"
RPC_PREFIX: Final = "o.rpc"

ALL_EVENTS: Final = f"{EVENTS_PREFIX}.>"
AGENT_EVENTS: Final = f"{EVENTS_PREFIX}.agent.*"
# An agent's events and those of its conversations (o.evt.agent.<id>.conv.<conv_id>).
AGENT_AND_CONVERSATION_EVENTS: Final = f"{EVENTS_PREFIX}.agent.>"
BLOCK_EVENTS: Final = f"{EVENTS_PREFIX}.block.*"
TOOL_EVENTS: Final = f"{EVENTS_PREFIX}.tool.*"
MCP_SERVER_EVENTS: Final = f"{EVENTS_PREFIX}.mcp_server.*"
# OAuth sign-ins to MCP servers, each an aggregate of its own (docs/mcp.md).
MCP_OAUTH_EVENTS: Final = f"{EVENTS_PREFIX}.mcp_server.oauth.*"
# The registry: servers and sign-ins (one projection follows both, in log order).
MCP_REGISTRY_EVENTS: Final = f"{EVENTS_PREFIX}.mcp_server.>"
GROUP_EVENTS: Final = f"{EVENTS_PREFIX}.group.*"
# Model providers registered through the API (events/providers.py).
PROVIDER_EVENTS: Final = f"{EVENTS_PREFIX}.provider.*"
# Identities (events/identities.py).
IDENTITY_EVENTS: Final = f"{EVENTS_PREFIX}.identity.*"
# Sandbox configurations and their environment variables (events/sandbox_configs.py).
SANDBOX_CONFIG_EVENTS: Final = f"{EVENTS_PREFIX}.sandbox_config.*"
SANDBOX_EVENTS: Final = f"{EVENTS_PREFIX}.sandbox.*"
ARCHIVAL_EVENTS: Final = f"{EVENTS_PREFIX}.archival.*"
# Archives agents share, and which agents each is attached to (events/archives.py).
ARCHIVE_EVENTS: Final = f"{EVENTS_PREFIX}.archive.>"
# One agent's evolution decisions, hash-chained (events/evolution.py).
EVOLUTION_EVENTS: Final = f"{EVENTS_PREFIX}.evolution.*"
# Folders (o.evt.folder.<folder_id>) and the processing of each of their files
# (o.evt.folder.<folder_id>.file.<file_id>): events/folders.py.
FOLDER_EVENTS: Final = f"{EVENTS_PREFIX}.folder.>"
FILE_UPLOADS: Final = f"{EVENTS_PREFIX}.folder.*"
# Which files an agent has open, and where (o.evt.agent_files.<agent_id>).
AGENT_FILES_EVENTS: Final = f"{EVENTS_PREFIX}.agent_files.*"
# One run's completion callback: its delivery and every attempt (events/callbacks.py).
CALLBACK_EVENTS: Final = f"{EVENTS_PREFIX}.callback.*"
# One schedule's life: created, changed, each slot fired or skipped, deleted (O's scheduled runs).
SCHEDULE_EVENTS: Final = f"{EVENTS_PREFIX}.schedule.*"
ALL_COMMANDS: Final = f"{COMMANDS_PREFIX}.>"
ALL_DEAD_LETTERS: Final = f"{DEAD_LETTER_PREFIX}.>"

# Commands are addressed to the service that owns the decision, keyed by the
# aggregate they act on.
EXECUTOR_COMMANDS: Final = f"{COMMANDS_PREFIX}.executor.*"
EVOLUTION_COMMANDS: Final = f"{COMMANDS_PREFIX}.evolution.*"
MEMORY_COMMANDS: Final = f"{COMMANDS_PREFIX}.memory.*"
# Processing an uploaded file (parse, chunk, embed): the memory service's own work queue,
# apart from memory commands, so a long file never holds up an agent's memory edit.
FILES_COMMANDS: Final = f"{COMMANDS_PREFIX}.files.*"
CALLBACK_COMMANDS: Final = f"{COMMANDS_PREFIX}.callback.*"
SCHEDULE_COMMANDS: Final = f"{COMMANDS_PREFIX}.schedule.*"

# Request/reply reads (core NATS, not persisted): nothing changes state here.
MEMORY_READ_CORE: Final = f"{RPC_PREFIX}.memory.core_memory"
# One completion with an agent's model, outside any run (POST /v1/agents/{id}/generate):
# any executor replica answers; nothing is recorded.
EXECUTOR_GENERATE: Final = f"{RPC_PREFIX}.executor.generate"
# What an agent's next prompt holds, with token estimates (GET /v1/agents/{id}/context).
EXECUTOR_READ_CONTEXT: Final = f"{RPC_PREFIX}.executor.context"
# The request a run's first model call would send, built and not sent (POST
# .../messages/preview-raw-payload): any executor replica answers; nothing is recorded.
EXECUTOR_PREVIEW_RUN: Final = f"{RPC_PREFIX}.executor.preview"
# Any sandbox replica answers with the isolation it applies (for /v1/health).
SANDBOX_CAPABILITIES: Final = f"{RPC_PREFIX}.sandbox.capabilities"
# Run a user's tool (a RunTool envelope; one replica of the queue group answers with an
# ExecutionState). The executor records the execution on `o.evt.sandbox.<id>`: the sandbox,
# which runs users' code, holds no JetStream access at all (docs/security.md).
SANDBOX_RUN: Final = f"{RPC_PREFIX}.sandbox.run"
# Every replica hears it; the one holding the execution answers (requests.ExecutionStatus).
SANDBOX_EXECUTIONS: Final = f"{RPC_PREFIX}.sandbox.executions"
# List the tools of, or call a tool of, a stdio MCP server: any sandbox replica answers,
# starting the server confined if it is not running there (o_contracts/mcp_stdio.py).
SANDBOX_MCP_STDIO: Final = f"{RPC_PREFIX}.sandbox.mcp_stdio"
# Install a set of tools' packages ahead of the first call (requests.PreparePackages): every
# replica hears it, none answers (a hint: a missed one costs the first call the install).
SANDBOX_PREPARE: Final = f"{RPC_PREFIX}.sandbox.prepare"

# Whether a process is still there (core NATS, request/reply): every service process answers
# on `o.rpc.alive.<role>.<incarnation>` for as long as its NATS connection lives, so a request
# that gets "no responders" proves the process gone (o_runtime/liveness.py).
ALIVE_PREFIX: Final = f"{RPC_PREFIX}.alive"

# The roll call (core NATS): every service process answers with who it is and whether it
# is ready (o_contracts/roll_call.py), so an operator's tool and the gateway's status route
# see every replica of every service without knowing where they run.
ROLL_CALL: Final = f"{RPC_PREFIX}.roll_call"

# "Someone waits for projection <name> to reach the sequence in the body" (core
# NATS, best effort): its follower moves a lagging checkpoint now (projector.py).
PROJECTION_WANTED_PREFIX: Final = "o.projection.wanted"

# Token deltas of a run's LLM output (core NATS, best effort): the recorded
# LLMResponded event stays the truth; deltas only make streaming feel live.
RUN_TOKENS_PREFIX: Final = "o.tokens.run"

# Archival search is a read that also records which passages were returned
# (PassagesAccessed), so their recency reflects use.
MEMORY_SEARCH_ARCHIVAL: Final = f"{RPC_PREFIX}.memory.archival_search"
# grep_files and semantic_search_files over the files of an agent's folders (a read).
MEMORY_SEARCH_FILES: Final = f"{RPC_PREFIX}.memory.file_search"


def agent_subject(agent_id: str) -> str:
    return f"{EVENTS_PREFIX}.agent.{agent_id}"


def conversation_subject(agent_id: str, conversation_id: str) -> str:
    """A named conversation's events: its creation and changes, and its runs.

    Under the agent's subject, so one filter (`o.evt.agent.>`) reads an agent
    and all its conversations; a subject of its own, so runs of two
    conversations append (with the expected-last-sequence check) in parallel.
    """
    return f"{EVENTS_PREFIX}.agent.{agent_id}.conv.{conversation_id}"


def conversation_of(subject: str) -> str | None:
    """The conversation whose subject this is; None for an agent's own (the default)."""
    parts = subject.split(".")
    return parts[5] if len(parts) == 6 and parts[4] == "conv" else None


@dataclass(frozen=True)
class Lane:
    """Where one conversation's runs go, one at a time in arrival order.

    The default conversation (Letta's agent-level message routes, or
    conversation "default") is the agent's own subject; a named one has its own
    event subject and its own command subject (so its own run queue).
    """

    agent_id: str
    conversation_id: str | None = None

    @property
    def key(self) -> str:
        """The run queue's key: the conversation's id, or the agent's for the default."""
        return self.conversation_id or self.agent_id

    @property
    def events(self) -> str:
        if self.conversation_id is None:
            return agent_subject(self.agent_id)
        return conversation_subject(self.agent_id, self.conversation_id)

    @property
    def commands(self) -> str:
        return executor_command_subject(self.key)


def block_subject(block_id: str) -> str:
    return f"{EVENTS_PREFIX}.block.{block_id}"


def archival_subject(agent_id: str) -> str:
    return f"{EVENTS_PREFIX}.archival.{agent_id}"


def identity_subject(identity_id: str) -> str:
    return f"{EVENTS_PREFIX}.identity.{identity_id}"


def sandbox_config_subject(sandbox_config_id: str) -> str:
    return f"{EVENTS_PREFIX}.sandbox_config.{sandbox_config_id}"


def archive_subject(archive_id: str) -> str:
    return f"{EVENTS_PREFIX}.archive.{archive_id}"


def archive_agent_subject(archive_id: str, agent_id: str) -> str:
    """Where an archive is attached to an agent and detached from it."""
    return f"{EVENTS_PREFIX}.archive.{archive_id}.agent.{agent_id}"


def agent_archives_filter(agent_id: str) -> str:
    """Every attaching and detaching of archives to and from one agent."""
    return f"{EVENTS_PREFIX}.archive.*.agent.{agent_id}"


def evolution_subject(agent_id: str) -> str:
    return f"{EVENTS_PREFIX}.evolution.{agent_id}"


def callback_subject(run_id: str) -> str:
    return f"{EVENTS_PREFIX}.callback.{run_id}"


def callback_command_subject(run_id: str) -> str:
    return f"{COMMANDS_PREFIX}.callback.{run_id}"


def evolution_command_subject(agent_id: str) -> str:
    return f"{COMMANDS_PREFIX}.evolution.{agent_id}"


def schedule_subject(schedule_id: str) -> str:
    return f"{EVENTS_PREFIX}.schedule.{schedule_id}"


def schedule_command_subject(agent_id: str) -> str:
    return f"{COMMANDS_PREFIX}.schedule.{agent_id}"


def executor_command_subject(agent_id: str) -> str:
    return f"{COMMANDS_PREFIX}.executor.{agent_id}"


def memory_command_subject(key: str) -> str:
    return f"{COMMANDS_PREFIX}.memory.{key}"


def alive_subject(role: str, incarnation: str) -> str:
    return f"{ALIVE_PREFIX}.{role}.{incarnation}"


def sandbox_alive_subject(replica: str) -> str:
    """A tool sandbox replica's liveness subject: it answers a run with its name first."""
    return alive_subject("tool_sandbox", replica)


def projection_wanted_subject(projection: str) -> str:
    return f"{PROJECTION_WANTED_PREFIX}.{projection}"


def run_tokens_subject(run_id: str) -> str:
    return f"{RUN_TOKENS_PREFIX}.{run_id}"


def dead_letter_subject(consumer: str) -> str:
    return f"{DEAD_LETTER_PREFIX}.{consumer}"


def tool_subject(tool_id: str) -> str:
    return f"{EVENTS_PREFIX}.tool.{tool_id}"


def group_subject(group_id: str) -> str:
    return f"{EVENTS_PREFIX}.group.{group_id}"


def provider_subject(provider_id: str) -> str:
    return f"{EVENTS_PREFIX}.provider.{provider_id}"


def folder_subject(folder_id: str) -> str:
    return f"{EVENTS_PREFIX}.folder.{folder_id}"


def file_subject(folder_id: str, file_id: str) -> str:
    """One uploaded file's processing, under its folder's subject: `o.evt.folder.>` reads a
    folder with all its files; a subject of its own lets the worker append each step with
    the expected-last-sequence check."""
    return f"{EVENTS_PREFIX}.folder.{folder_id}.file.{file_id}"


def agent_files_subject(agent_id: str) -> str:
    return f"{EVENTS_PREFIX}.agent_files.{agent_id}"


def files_command_subject(file_id: str) -> str:
    return f"{COMMANDS_PREFIX}.files.{file_id}"


def mcp_server_subject(mcp_server_id: str) -> str:
    return f"{EVENTS_PREFIX}.mcp_server.{mcp_server_id}"


def mcp_oauth_subject(session_id: str) -> str:
    return f"{EVENTS_PREFIX}.mcp_server.oauth.{session_id}"


def tool_execution_subject(execution_id: str) -> str:
    return f"{EVENTS_PREFIX}.sandbox.{execution_id}"

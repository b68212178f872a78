"""The AsyncAPI 3.0 document of every channel, generated from the contracts.

`make asyncapi` writes it to contracts/asyncapi.yaml; a unit test keeps the
committed copy in step with the code. Payloads are the envelope (see
envelope.py) with `data` typed per message, MessagePack on the wire.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from o_contracts import (
    commands,
    events,
    evolution_commands,
    file_commands,
    mcp_stdio,
    schedule_commands,
    subjects,
)
from o_contracts.base import Message
from o_contracts.registry import all_messages


@dataclass(frozen=True)
class Channel:
    key: str
    address: str
    # The address's parameters ({name} in it), in order.
    parameter: str | tuple[str, ...] | None
    description: str
    messages: tuple[type[Message], ...]
    # "send": O appends here and others subscribe; "receive": others may publish here.
    action: str

    @property
    def parameters(self) -> tuple[str, ...]:
        if self.parameter is None:
            return ()
        return (self.parameter,) if isinstance(self.parameter, str) else self.parameter


CHANNELS = (
    Channel(
        "agentEvents",
        f"{subjects.EVENTS_PREFIX}.agent.{{agent_id}}",
        "agent_id",
        f"Everything that happens to one agent, in order (stream {subjects.EVENTS_STREAM}).",
        (
            events.AgentCreated,
            events.MessagesImported,
            events.AgentUpdated,
            events.AgentDeleted,
            events.BlockAttached,
            events.BlockDetached,
            events.ToolAttached,
            events.ToolDetached,
            events.FolderAttached,
            events.FolderDetached,
            events.RunQueued,
            events.RunStarted,
            events.RunCancellationRequested,
            events.RunSteerRequested,
            events.RunSteered,
            events.RunRolledBack,
            events.LLMResponded,
            events.ToolCallRequested,
            events.ToolReturned,
            events.ContextSummarized,
            events.RunCompleted,
            events.StepFeedbackGiven,
            events.SystemPromptRecompiled,
            events.MessagesReset,
            events.SleeptimeTurnCounted,
        ),
        "send",
    ),
    Channel(
        "conversationEvents",
        f"{subjects.EVENTS_PREFIX}.agent.{{agent_id}}.conv.{{conversation_id}}",
        ("agent_id", "conversation_id"),
        "One named conversation of an agent: its creation and changes, then its runs "
        "(the run events of agentEvents), in order; the agent's default conversation is "
        f"agentEvents itself (stream {subjects.EVENTS_STREAM}).",
        (
            events.ConversationCreated,
            events.ConversationUpdated,
            events.ConversationDeleted,
            events.SystemPromptRecompiled,
            events.RunQueued,
            events.RunStarted,
            events.RunCancellationRequested,
            events.RunSteerRequested,
            events.RunSteered,
            events.RunRolledBack,
            events.LLMResponded,
            events.ToolCallRequested,
            events.ToolReturned,
            events.ContextSummarized,
            events.RunCompleted,
            events.StepFeedbackGiven,
        ),
        "send",
    ),
    Channel(
        "blockEvents",
        f"{subjects.EVENTS_PREFIX}.block.{{block_id}}",
        "block_id",
        f"Versions of one core memory block (stream {subjects.EVENTS_STREAM}).",
        (events.BlockCreated, events.BlockUpdated, events.BlockDeleted),
        "send",
    ),
    Channel(
        "toolEvents",
        f"{subjects.EVENTS_PREFIX}.tool.{{tool_id}}",
        "tool_id",
        f"The tool registry: one user tool's versions (stream {subjects.EVENTS_STREAM}).",
        (events.ToolCreated, events.ToolUpdated, events.ToolDeleted),
        "send",
    ),
    Channel(
        "mcpServerEvents",
        f"{subjects.EVENTS_PREFIX}.mcp_server.{{mcp_server_id}}",
        "mcp_server_id",
        f"The MCP server registry: one server's settings (secrets as ciphertext) and the "
        f"tools it offered at its last sync (stream {subjects.EVENTS_STREAM}).",
        (
            events.McpServerCreated,
            events.McpServerUpdated,
            events.McpServerDeleted,
            events.McpServerToolsSynced,
        ),
        "send",
    ),
    Channel(
        "mcpOAuthEvents",
        f"{subjects.EVENTS_PREFIX}.mcp_server.oauth.{{session_id}}",
        "session_id",
        "One OAuth sign-in to an MCP server: its start, the authorization server's answer, "
        "the tokens (code, tokens and client registration as ciphertext; the state as its "
        f"digest) and their refreshes (stream {subjects.EVENTS_STREAM}).",
        (
            events.McpOAuthStarted,
            events.McpOAuthCallbackReceived,
            events.McpOAuthAuthorized,
            events.McpOAuthTokensRefreshed,
            events.McpOAuthFailed,
        ),
        "send",
    ),
    Channel(
        "groupEvents",
        f"{subjects.EVENTS_PREFIX}.group.{{group_id}}",
        "group_id",
        "One multi-agent group: its type, agents and manager settings; a sleep-time "
        "group's turns are SleeptimeTurnCounted on its manager's agentEvents "
        f"(stream {subjects.EVENTS_STREAM}).",
        (events.GroupCreated, events.GroupUpdated, events.GroupDeleted),
        "send",
    ),
    Channel(
        "identityEvents",
        f"{subjects.EVENTS_PREFIX}.identity.{{identity_id}}",
        "identity_id",
        "One identity an application's agents serve (Letta's identities), appended only by "
        "the gateway: its key, name, type and properties, and the agents and blocks it has "
        f"(stream {subjects.EVENTS_STREAM}).",
        (events.IdentityCreated, events.IdentityUpdated, events.IdentityDeleted),
        "send",
    ),
    Channel(
        "sandboxConfigEvents",
        f"{subjects.EVENTS_PREFIX}.sandbox_config.{{sandbox_config_id}}",
        "sandbox_config_id",
        "One sandbox configuration (Letta's sandbox-config), appended only by the gateway: its "
        "type and settings, and its environment variables, whose values are Fernet ciphertext "
        f"(stream {subjects.EVENTS_STREAM}).",
        (
            events.SandboxConfigCreated,
            events.SandboxConfigUpdated,
            events.SandboxConfigDeleted,
            events.SandboxEnvVarSet,
            events.SandboxEnvVarDeleted,
        ),
        "send",
    ),
    Channel(
        "providerEvents",
        f"{subjects.EVENTS_PREFIX}.provider.{{provider_id}}",
        "provider_id",
        "One model provider registered through the API (Letta's bring-your-own-key): its "
        "type, address and key (as ciphertext), and the models it listed when last asked "
        f"(stream {subjects.EVENTS_STREAM}).",
        (
            events.ProviderCreated,
            events.ProviderUpdated,
            events.ProviderModelsSynced,
            events.ProviderDeleted,
        ),
        "send",
    ),
    Channel(
        "evolutionEvents",
        f"{subjects.EVENTS_PREFIX}.evolution.{{agent_id}}",
        "agent_id",
        "One agent's evolution decisions, appended only by the evolution service and "
        "hash-chained (each carries prev_hash and its own hash over its content): "
        "configuration, proposals, shadow cases, gate decisions, reviews, canary steps, "
        "promotions and rollbacks, and which version the agent serves; promoting or "
        "rolling back also appends AgentUpdated on agentEvents and UpdateBlock commands "
        f"(stream {subjects.EVENTS_STREAM}).",
        (
            events.EvolutionConfigured,
            events.ChangeProposed,
            events.ProposalRefused,
            events.EvaluationStarted,
            events.CaseEvaluated,
            events.CandidateEvaluated,
            events.ProposalApproved,
            events.ProposalRejected,
            events.VersionPromoted,
            events.RolloutStarted,
            events.RolloutAdvanced,
            events.RolloutCompleted,
            events.RolloutAborted,
            events.VersionRolledBack,
            events.EvolutionToolCalled,
            events.EvolutionBudgetExhausted,
        ),
        "send",
    ),
    Channel(
        "evolutionCommands",
        f"{subjects.COMMANDS_PREFIX}.evolution.{{agent_id}}",
        "agent_id",
        f"Ask the evolution service to configure, propose, evaluate, review, roll out (canary), "
        f"abort, promote or roll back an agent's version (stream {subjects.COMMANDS_STREAM}); "
        "add O-Reply-To to get a Reply.",
        (
            evolution_commands.ConfigureEvolution,
            evolution_commands.ProposeChange,
            evolution_commands.EvaluateProposal,
            evolution_commands.ReviewProposal,
            evolution_commands.PromoteProposal,
            evolution_commands.StartRollout,
            evolution_commands.AbortRollout,
            evolution_commands.RollBackVersion,
            evolution_commands.RunEvolutionTool,
        ),
        "receive",
    ),
    Channel(
        "scheduleEvents",
        f"{subjects.EVENTS_PREFIX}.schedule.{{schedule_id}}",
        "schedule_id",
        "One schedule of an agent (O's scheduled runs), appended by the scheduler one after "
        "the other: its creation and changes, each slot fired (with the run it starts, whose "
        "id derives from the schedule and the slot) or skipped by the missed-slot policy, and "
        "its deletion, also when its agent is deleted; a fired slot's run then appears on "
        f"agentEvents like any other (stream {subjects.EVENTS_STREAM}).",
        (
            events.ScheduleCreated,
            events.ScheduleUpdated,
            events.ScheduleFired,
            events.ScheduleSlotsSkipped,
            events.ScheduleDeleted,
        ),
        "send",
    ),
    Channel(
        "scheduleCommands",
        f"{subjects.COMMANDS_PREFIX}.schedule.{{agent_id}}",
        "agent_id",
        "Ask the scheduler to create, change (enable, disable) or delete a schedule of an "
        f"agent (stream {subjects.COMMANDS_STREAM}); add O-Reply-To to get a Reply.",
        (
            schedule_commands.CreateSchedule,
            schedule_commands.UpdateSchedule,
            schedule_commands.DeleteSchedule,
        ),
        "receive",
    ),
    Channel(
        "toolExecutionEvents",
        f"{subjects.EVENTS_PREFIX}.sandbox.{{execution_id}}",
        "execution_id",
        f"One sandboxed tool run, recorded by the executor (stream {subjects.EVENTS_STREAM});"
        " execution_id is the RunTool request's id.",
        (events.ToolExecutionStarted, events.ToolExecuted, events.ToolExecutionFailed),
        "send",
    ),
    Channel(
        "sandboxRun",
        subjects.SANDBOX_RUN,
        None,
        "Request/reply (core NATS, O's executor only): a tool sandbox replica runs the user"
        " tool and answers with an ExecutionState whose outcome the executor records.",
        (commands.RunTool,),
        "receive",
    ),
    Channel(
        "archivalEvents",
        f"{subjects.EVENTS_PREFIX}.archival.{{agent_id}}",
        "agent_id",
        f"One agent's archival memory: passages with embeddings, accesses, reflections "
        f"(stream {subjects.EVENTS_STREAM}).",
        (
            events.PassageInserted,
            events.PassageDeleted,
            events.PassagesAccessed,
            events.MemoriesReflected,
        ),
        "send",
    ),
    Channel(
        "archiveEvents",
        f"{subjects.EVENTS_PREFIX}.archive.{{archive_id}}",
        "archive_id",
        "One archive: archival passages that the agents attached to it share (Letta's "
        "archives), appended only by the memory service: its name, and the passages put "
        f"in it, through its API or by an agent (stream {subjects.EVENTS_STREAM}).",
        (
            events.ArchiveCreated,
            events.ArchiveUpdated,
            events.ArchiveDeleted,
            events.ArchivePassagesInserted,
            events.ArchivePassageDeleted,
        ),
        "send",
    ),
    Channel(
        "archiveAgentEvents",
        f"{subjects.EVENTS_PREFIX}.archive.{{archive_id}}.agent.{{agent_id}}",
        ("archive_id", "agent_id"),
        "An archive attached to one agent and detached from it, appended only by the "
        f"memory service (stream {subjects.EVENTS_STREAM}).",
        (events.ArchiveAttached, events.ArchiveDetached),
        "send",
    ),
    Channel(
        "executorCommands",
        f"{subjects.COMMANDS_PREFIX}.executor.{{agent_id}}",
        "agent_id",
        f"Ask the executor to run an agent (stream {subjects.COMMANDS_STREAM}). Set "
        "Nats-Msg-Id to the envelope id; add O-Reply-To to get a Reply when the run ends.",
        (commands.StartRun,),
        "receive",
    ),
    Channel(
        "callbackEvents",
        f"{subjects.EVENTS_PREFIX}.callback.{{run_id}}",
        "run_id",
        "One run's completion callback (StartRun.callback_url), appended only by the "
        "gateway: the delivery with its signed body, every attempt and its outcome, then "
        f"delivered or abandoned (stream {subjects.EVENTS_STREAM}).",
        (
            events.CallbackScheduled,
            events.CallbackAttempted,
            events.CallbackDelivered,
            events.CallbackAbandoned,
        ),
        "send",
    ),
    Channel(
        "callbackCommands",
        f"{subjects.COMMANDS_PREFIX}.callback.{{run_id}}",
        "run_id",
        "A run's callback delivery, asked of the gateway by the executor as a run with a "
        "callback_url ends (retries are redeliveries with a delay) "
        f"(stream {subjects.COMMANDS_STREAM}); a repeat changes nothing.",
        (commands.DeliverCallback,),
        "receive",
    ),
    Channel(
        "memoryCommands",
        f"{subjects.COMMANDS_PREFIX}.memory.{{key}}",
        "key",
        f"Ask the memory service to change blocks (stream {subjects.COMMANDS_STREAM}); key is "
        "the block id, the agent id for memory tools, archival memory and its open files, or the "
        "archive id for an archive's changes.",
        (
            commands.CreateBlock,
            commands.UpdateBlock,
            commands.DeleteBlock,
            commands.RunMemoryTool,
            commands.RestoreBlockVersion,
            commands.EditBlockText,
            commands.InsertPassage,
            commands.DeletePassage,
            commands.ReflectOnMemories,
            commands.CreateArchive,
            commands.UpdateArchive,
            commands.DeleteArchive,
            commands.AttachArchive,
            commands.DetachArchive,
            commands.InsertArchivePassages,
            commands.DeleteArchivePassage,
            file_commands.OpenFiles,
            file_commands.CloseFiles,
        ),
        "receive",
    ),
    Channel(
        "folderEvents",
        f"{subjects.EVENTS_PREFIX}.folder.{{folder_id}}",
        "folder_id",
        "One folder: its creation, changes and deletion, and its files' uploads and "
        "deletions (an upload's bytes are in the object store "
        f"{subjects.FILES_BUCKET}, named by their SHA-256) (stream {subjects.EVENTS_STREAM}).",
        (
            events.FolderCreated,
            events.FolderUpdated,
            events.FolderDeleted,
            events.FileUploaded,
            events.FileDeleted,
        ),
        "send",
    ),
    Channel(
        "fileEvents",
        f"{subjects.EVENTS_PREFIX}.folder.{{folder_id}}.file.{{file_id}}",
        ("folder_id", "file_id"),
        "The processing of one uploaded file, a step per event: started, parsed, chunks "
        f"embedded (in batches), processed or failed (stream {subjects.EVENTS_STREAM}).",
        (
            events.FileProcessingStarted,
            events.FileParsed,
            events.FileChunksEmbedded,
            events.FileProcessed,
            events.FileFailed,
        ),
        "send",
    ),
    Channel(
        "agentFilesEvents",
        f"{subjects.EVENTS_PREFIX}.agent_files.{{agent_id}}",
        "agent_id",
        "Which files of its folders an agent has open, and which lines of each "
        f"(stream {subjects.EVENTS_STREAM}).",
        (events.FilesOpened, events.FilesClosed),
        "send",
    ),
    Channel(
        "filesCommands",
        f"{subjects.COMMANDS_PREFIX}.files.{{file_id}}",
        "file_id",
        "Ask the memory service to process an uploaded file (it sends these itself for "
        f"every FileUploaded) (stream {subjects.COMMANDS_STREAM}); add O-Reply-To to get a "
        "Reply when it is done.",
        (file_commands.ProcessFile,),
        "receive",
    ),
)


@dataclass(frozen=True)
class RequestChannel:
    """A core NATS request/reply subject (not persisted): payloads are plain MessagePack
    objects, not envelopes; the answer goes to the request's reply inbox."""

    key: str
    address: str
    description: str
    request: type[BaseModel]
    reply: type[BaseModel]


REQUEST_CHANNELS = (
    RequestChannel(
        "sandboxMcpStdio",
        subjects.SANDBOX_MCP_STDIO,
        "Ask a stdio MCP server for its tools or to run one: any tool-sandbox replica "
        "answers, starting the server (confined like a user tool) if it is not running "
        "there. The server's environment travels as Fernet ciphertext.",
        mcp_stdio.McpStdioRequest,
        mcp_stdio.McpStdioReply,
    ),
)


def _request_channels(
    channels: dict[str, Any],
    operations: dict[str, Any],
    messages: dict[str, Any],
    schemas: dict[str, Any],
) -> None:
    for ch in REQUEST_CHANNELS:
        refs = {}
        for cls in (ch.request, ch.reply):
            name = cls.__name__
            payload = cls.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(payload.pop("$defs", {}))
            messages[name] = {
                "name": name,
                "title": name,
                "summary": (cls.__doc__ or name).strip().splitlines()[0],
                "contentType": "application/msgpack",
                "payload": payload,
            }
            refs[name] = {"$ref": f"#/components/messages/{name}"}
        channels[ch.key] = {
            "address": ch.address,
            "description": ch.description,
            "messages": refs,
        }
        request, reply = ch.request.__name__, ch.reply.__name__
        operations[f"receive{ch.key[0].upper()}{ch.key[1:]}"] = {
            "action": "receive",
            "channel": {"$ref": f"#/channels/{ch.key}"},
            "messages": [{"$ref": f"#/channels/{ch.key}/messages/{request}"}],
            "reply": {
                "address": {
                    "description": "The request's NATS reply inbox.",
                    "location": "$message.header#/reply_to",
                },
                "messages": [{"$ref": f"#/channels/{ch.key}/messages/{reply}"}],
            },
        }


HEADERS = {
    "type": "object",
    "properties": {
        "Nats-Msg-Id": {
            "type": "string",
            "description": "The envelope id; retries are deduplicated.",
        },
        "Nats-Expected-Last-Subject-Sequence": {
            "type": "string",
            "description": "Optimistic concurrency on the aggregate subject.",
        },
        "O-Reply-To": {"type": "string", "description": "Commands: inbox for the Reply."},
    },
}


def _envelope_schema(cls: type[Message]) -> dict[str, Any]:
    data = cls.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = data.pop("$defs", {})
    return {
        "type": "object",
        "required": ["id", "type", "v", "aggregate_id", "time", "producer", "data"],
        "properties": {
            "id": {"type": "string", "description": "Unique id, also the Nats-Msg-Id header."},
            "type": {"const": cls.type_name()},
            "v": {"const": cls.schema_version, "description": "Schema version of data."},
            "aggregate_id": {"type": "string"},
            "causation_id": {"type": ["string", "null"]},
            "correlation_id": {"type": ["string", "null"]},
            "time": {"type": "string", "format": "date-time"},
            "producer": {"type": "string"},
            "data": data,
        },
    } | ({"$defs": defs} if defs else {})


def document() -> dict[str, Any]:
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for ch in CHANNELS:
        refs = {}
        for cls in ch.messages:
            name = cls.type_name()
            schema = _envelope_schema(cls)
            schemas.update(schema.pop("$defs", {}))
            messages[name] = {
                "name": name,
                "title": name,
                "summary": (cls.__doc__ or name).strip().splitlines()[0],
                "contentType": "application/msgpack",
                "headers": HEADERS,
                "payload": schema,
            }
            refs[name] = {"$ref": f"#/components/messages/{name}"}
        channels[ch.key] = {
            "address": ch.address,
            "description": ch.description,
            "messages": refs,
        } | (
            {"parameters": {p: {"description": f"The {p}."} for p in ch.parameters}}
            if ch.parameter
            else {}
        )
        operations[f"{ch.action}{ch.key[0].upper()}{ch.key[1:]}"] = {
            "action": ch.action,
            "channel": {"$ref": f"#/channels/{ch.key}"},
            "messages": [{"$ref": f"#/channels/{ch.key}/messages/{m}"} for m in refs],
        }
    _request_channels(channels, operations, messages, schemas)
    channels["deadLetters"] = {
        "address": f"{subjects.DEAD_LETTER_PREFIX}.{{consumer}}",
        "description": f"Rejected messages with O-Reason, O-Origin-Subject and O-Origin-Seq "
        f"headers (stream {subjects.DEAD_LETTER_STREAM}); the payload is the original bytes.",
        "parameters": {"consumer": {"description": "The consumer that rejected it."}},
    }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "O events and commands",
            "version": "1.0.0",
            "description": "NATS JetStream contracts of O. Events are facts appended by the "
            "service that owns them; commands are requests other systems may publish.",
        },
        "defaultContentType": "application/msgpack",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": schemas},
    }


def uncovered() -> list[str]:
    """Registered message types that no channel documents (should be none)."""
    covered = {cls for ch in CHANNELS for cls in ch.messages}
    return sorted(m.type_name() for m in all_messages() if m not in covered)


def render() -> str:
    return yaml.safe_dump(document(), sort_keys=False, width=100, allow_unicode=True)


if __name__ == "__main__":
    sys.stdout.write(render())

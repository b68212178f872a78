"""The NATS roles (o_setup/roles.py) against what the services use: every subject a
service's code names is granted to its role, every durable consumer a service binds to is
declared for the setup role to make, and the lines that must never be crossed are not
(events only from the service deciding them, no JetStream for the sandbox, no consumer or
stream management outside the setup role, outside publishers on public commands only)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from o_contracts import subjects
from o_contracts.requests import GENERATE_WITHIN
from o_setup import roles, topology
from o_setup.credentials import Credentials
from o_setup.roles import ROLES, Grant
from o_setup.server_config import authorization

SERVICES = Path(__file__).resolve().parents[2] / "services"
# Whose code runs as which role.
PACKAGES = {
    "gateway": ("o_gateway", "o_runtime/mcp_stdio_relay.py"),
    "executor": ("o_executor", "o_runtime/mcp_stdio_relay.py"),
    "memory": ("o_memory",),
    "evolution": ("o_evolution", "o_schedules"),
    "tool_sandbox": ("o_tool_sandbox",),
}


def covers(allow: str, subject: str) -> bool:
    """Whether nats-server's allow pattern `allow` admits `subject` (itself maybe a
    pattern: then every subject it stands for)."""
    a, s = allow.split("."), subject.split(".")
    for i, token in enumerate(a):
        if token == ">":
            return len(s) > i
        if i >= len(s):
            return False
        if token == "*":
            if s[i] == ">":
                return False
            continue
        if token != s[i]:
            return False
    return len(a) == len(s)


def may_publish(grant: Grant, subject: str) -> bool:
    return any(covers(p, subject) for p in grant.publish)


def may_subscribe(grant: Grant, subject: str) -> bool:
    return any(covers(p, subject) for p in grant.subscribe)


def named_subjects(package: str) -> set[str]:
    """The NATS subjects a package's code names through o_contracts.subjects."""
    names: set[str] = set()
    root = SERVICES / package
    for path in [root] if root.is_file() else root.rglob("*.py"):
        text = path.read_text()
        names |= set(re.findall(r"\bsubjects\.([A-Za-z_]+)", text))
        for imported in re.findall(r"from o_contracts\.subjects import ([^\n(]+)", text):
            names |= {n.strip() for n in imported.split(",")}
    out: set[str] = set()
    for name in names:
        value = getattr(subjects, name, None)
        if isinstance(value, str) and value.startswith(("o.", "_")):
            out.add(value)
        elif callable(value) and name.endswith("_subject"):
            out.add(value(*(["x"] * value.__code__.co_argcount)))
    return out


def test_the_pattern_matcher_follows_nats_wildcards() -> None:
    assert covers("o.evt.>", "o.evt.agent.a.conv.c")
    assert covers("o.evt.agent.*", "o.evt.agent.a")
    assert not covers("o.evt.agent.*", "o.evt.agent.a.conv.c")
    assert covers("o.evt.agent.>", "o.evt.agent.*")
    assert not covers("o.evt.agent.*", "o.evt.agent.>")
    assert not covers("o.evt.block.*", "o.evt.agent.a")


@pytest.mark.parametrize("role", sorted(PACKAGES))
def test_every_subject_a_services_code_names_is_granted_to_its_role(role: str) -> None:
    grant = ROLES[role].grant
    used = set().union(*(named_subjects(p) for p in PACKAGES[role]))
    assert used, role
    # (What it pulls from its durable consumers comes through the JetStream API.)
    pulled = {d.filter_subject for d in topology.durables() if d.owner == role}
    missing = sorted(
        s for s in used - pulled if not (may_publish(grant, s) or may_subscribe(grant, s))
    )
    assert missing == []


CONSUMER_INFO = re.compile(r"consumer_info\(\s*subjects\.(\w+),\s*(\"[^\"]+\"|[A-Z_]+)\s*\)")


def asked_consumer_states(package: str) -> set[str]:
    """The JetStream API subjects of the consumers whose state a package's code reads by
    name (`js.consumer_info(subjects.STREAM, NAME)`)."""
    out: set[str] = set()
    root = SERVICES / package
    for path in [root] if root.is_file() else root.rglob("*.py"):
        text = path.read_text()
        for stream, name in CONSUMER_INFO.findall(text):
            if not name.startswith('"'):
                defined = re.search(rf"^{name}\s*(?::[^=]+)?=\s*(\"[^\"]+\")", text, re.M)
                assert defined, f"{path}: {name} is not a string constant of the module"
                name = defined.group(1)
            consumer = name.strip('"')
            out.add(f"$JS.API.CONSUMER.INFO.{getattr(subjects, stream)}.{consumer}")
    return out


@pytest.mark.parametrize("role", sorted(PACKAGES))
def test_every_consumer_a_services_code_looks_at_is_granted_to_its_role(role: str) -> None:
    # (The executor's memory edits in doubt after a crash read the memory consumer's ack
    # floor; without the grant such a run was retried for ever: test_durable_runs.py.)
    grant = ROLES[role].grant
    asked = set().union(*(asked_consumer_states(p) for p in PACKAGES[role]))
    assert sorted(s for s in asked if not may_publish(grant, s)) == []


def test_the_consumers_the_executor_and_evolution_look_at_are_found() -> None:
    assert asked_consumer_states("o_executor") == {"$JS.API.CONSUMER.INFO.O_COMMANDS.memory"}
    assert asked_consumer_states("o_evolution") == {"$JS.API.CONSUMER.INFO.O_COMMANDS.executor"}


CONSUMER = re.compile(
    r"(CommandConsumer|EventReactor)\(\s*[\w.]+,\s*\"([^\"]+)\",\s*subjects\.(\w+)", re.S
)


def bound_durables() -> set[tuple[str, str, str, str]]:
    """(stream, name, filter, role) of every durable the services' code binds to."""
    out: set[tuple[str, str, str, str]] = set()
    for role, packages in PACKAGES.items():
        for package in packages:
            root = SERVICES / package
            for path in [root] if root.is_file() else root.rglob("*.py"):
                for kind, name, filter_name in CONSUMER.findall(path.read_text()):
                    stream = (
                        subjects.COMMANDS_STREAM
                        if kind == "CommandConsumer"
                        else subjects.EVENTS_STREAM
                    )
                    out.add((stream, name, getattr(subjects, filter_name), role))
    from o_schedules.dispatch import CONSUMER as FIRES

    out.add((subjects.EVENTS_STREAM, FIRES, subjects.SCHEDULE_EVENTS, "evolution"))
    return out


def test_every_durable_a_service_binds_to_is_declared_for_the_setup_role() -> None:
    declared = {(d.stream, d.name, d.filter_subject, d.owner) for d in topology.durables()}
    assert bound_durables() == declared


@pytest.mark.parametrize("durable", topology.durables(), ids=lambda d: f"{d.stream}/{d.name}")
def test_only_its_owner_pulls_from_a_durable(durable: topology.Durable) -> None:
    next_msg = f"$JS.API.CONSUMER.MSG.NEXT.{durable.stream}.{durable.name}"
    pulling = {r.name for r in ROLES.values() if may_publish(r.grant, next_msg)}
    assert pulling == {durable.owner, "operator", "setup"}


# Who may append to each aggregate's events (the service that decides them).
WRITERS = {
    subjects.agent_subject("a"): {"gateway", "executor", "evolution"},
    subjects.conversation_subject("a", "c"): {"gateway", "executor", "evolution"},
    subjects.block_subject("b"): {"memory"},
    subjects.archival_subject("a"): {"memory"},
    subjects.evolution_subject("a"): {"evolution"},
    subjects.schedule_subject("s"): {"evolution"},
    subjects.callback_subject("r"): {"gateway"},
    subjects.tool_subject("t"): {"gateway"},
    subjects.group_subject("g"): {"gateway"},
    subjects.mcp_server_subject("m"): {"gateway"},
    # (Tokens are refreshed by whoever calls the server: the executor too.)
    subjects.mcp_oauth_subject("s"): {"gateway", "executor"},
    # (Tools the API runs directly record their execution too: /v1/tools/run.)
    subjects.tool_execution_subject("e"): {"executor", "gateway"},
    subjects.folder_subject("f"): {"gateway"},
    subjects.file_subject("f", "x"): {"memory"},
    subjects.agent_files_subject("a"): {"memory"},
}


@pytest.mark.parametrize("subject", sorted(WRITERS))
def test_only_the_deciding_service_appends_an_aggregates_events(subject: str) -> None:
    writers = {r.name for r in ROLES.values() if may_publish(r.grant, subject)}
    assert writers == WRITERS[subject] | {"operator"}


@pytest.mark.parametrize(
    "api",
    [
        "$JS.API.STREAM.CREATE.O_EVENTS",
        "$JS.API.STREAM.UPDATE.O_EVENTS",
        "$JS.API.STREAM.DELETE.O_EVENTS",
        "$JS.API.STREAM.PURGE.O_EVENTS",
        "$JS.API.STREAM.MSG.DELETE.O_EVENTS",
        "$JS.API.CONSUMER.CREATE.O_COMMANDS",
        "$JS.API.CONSUMER.CREATE.O_COMMANDS.executor.o.cmd.executor.*",
        "$JS.API.CONSUMER.DURABLE.CREATE.O_EVENTS.x",
        "$JS.API.CONSUMER.DELETE.O_COMMANDS.executor",
        "$JS.API.CONSUMER.CREATE.OBJ_O_IMAGES",
        "$JS.API.CONSUMER.CREATE.O_DEAD_LETTERS",
    ],
)
def test_only_the_setup_role_manages_streams_and_durable_consumers(api: str) -> None:
    assert {r.name for r in ROLES.values() if may_publish(r.grant, api)} == {"operator", "setup"}


def test_only_the_executor_takes_a_command_out_of_its_stream() -> None:
    # (A run's command refused before its turn: o_executor/run_queue.withdraw.)
    api = f"$JS.API.STREAM.MSG.DELETE.{subjects.COMMANDS_STREAM}"
    deleters = {r.name for r in ROLES.values() if may_publish(r.grant, api)}
    assert deleters == {"executor", "operator", "setup"}


def test_the_sandbox_answers_its_own_requests_and_nothing_else() -> None:
    grant = roles.TOOL_SANDBOX.grant
    assert grant.publish == ()
    # A run is answered twice: which replica took it, then its outcome.
    assert grant.responds == 2
    assert set(grant.subscribe) == {
        subjects.SANDBOX_RUN,
        subjects.SANDBOX_EXECUTIONS,
        subjects.SANDBOX_CAPABILITIES,
        subjects.SANDBOX_MCP_STDIO,
        # (Packages to install ahead: a hint it hears and does not answer.)
        subjects.SANDBOX_PREPARE,
        subjects.sandbox_alive_subject("*"),
        # (Who it is and whether it is ready: o_runtime/roll_call.py.)
        subjects.ROLL_CALL,
    }
    assert "allow_responses: { max: 2 }" in authorization_of(roles.TOOL_SANDBOX)


def authorization_of(role: roles.Role) -> str:
    from o_setup.server_config import permissions

    return permissions(role.grant)


COMMAND_DURABLES = [d for d in topology.durables() if d.stream == subjects.COMMANDS_STREAM]


@pytest.mark.parametrize("durable", COMMAND_DURABLES, ids=lambda d: d.name)
def test_a_command_consumers_owner_keeps_and_takes_over_its_holdings_only(
    durable: topology.Durable,
) -> None:
    key = f"$KV.{topology.HELD_BUCKET}.{durable.name}.1234-abcdef"
    writers = {r.name for r in ROLES.values() if may_publish(r.grant, key)}
    assert writers == {durable.owner, "operator"}
    owner = ROLES[durable.owner].grant
    assert may_subscribe(owner, key)
    # (It finds the other holders' keys with a stream info, and reads them one by one.)
    assert may_publish(owner, f"$JS.API.STREAM.INFO.KV_{topology.HELD_BUCKET}")
    assert may_publish(owner, f"$JS.API.DIRECT.GET.KV_{topology.HELD_BUCKET}.$KV.x")
    # The nak that gives a dead holder's message back is an ack subject of its own durable.
    assert may_publish(owner, f"$JS.ACK.{durable.stream}.{durable.name}.1.2.3.4.5")


@pytest.mark.parametrize("role", sorted(PACKAGES))
def test_every_service_answers_whether_it_lives_and_asks_its_fellow_replicas(role: str) -> None:
    grant = ROLES[role].grant
    mine = subjects.alive_subject(role, "1234-abcdef")
    assert may_subscribe(grant, mine)
    assert grant.responds >= 1
    other = subjects.alive_subject("executor" if role != "executor" else "memory", "x")
    assert not may_subscribe(grant, other)
    if role != "tool_sandbox":
        assert may_publish(grant, mine)


def test_whoever_runs_tools_asks_whether_the_sandbox_replica_running_them_lives() -> None:
    alive = subjects.sandbox_alive_subject("host-1-abc123")
    askers = {r.name for r in ROLES.values() if may_publish(r.grant, alive)}
    assert askers == {"executor", "gateway", "operator"}


def test_whoever_asks_for_a_completion_asks_whether_the_executor_that_took_it_lives() -> None:
    alive = subjects.alive_subject("executor", "host-1-abc123")
    askers = {r.name for r in ROLES.values() if may_publish(r.grant, subjects.EXECUTOR_GENERATE)}
    assert askers <= {r.name for r in ROLES.values() if may_publish(r.grant, alive)}
    assert {"gateway", "memory"} <= askers


def test_the_executor_answers_a_completion_twice_for_as_long_as_it_is_waited_for() -> None:
    # Who took it, then the answer (o_runtime/watched_answers.py); nats-server's own
    # default would refuse an answer later than two minutes.
    grant = roles.EXECUTOR.grant
    assert grant.responds == 2
    assert grant.responds_within > GENERATE_WITHIN
    rendered = authorization_of(roles.EXECUTOR)
    assert f'allow_responses: {{ max: 2, expires: "{grant.responds_within:.0f}s" }}' in rendered


def test_an_outside_publisher_sends_public_commands_and_reads_its_replies_only() -> None:
    anyone = roles.publisher("partner").grant
    assert may_publish(anyone, "o.cmd.executor.a") and may_publish(anyone, "o.cmd.memory.a")
    assert may_publish(anyone, "o.cmd.schedule.a")
    for refused in ("o.evt.agent.a", "o.cmd.evolution.a", "o.cmd.callback.r", "$JS.API.INFO"):
        assert not may_publish(anyone, refused), refused
    assert anyone.subscribe == ("_INBOX.partner.>",)
    assert not may_subscribe(anyone, "_INBOX.gateway.x")


def test_a_publisher_restricted_to_agents_sends_only_their_commands() -> None:
    mine = roles.publisher("partner", ["agent-1"]).grant
    assert set(mine.publish) == {
        "o.cmd.executor.agent-1",
        "o.cmd.memory.agent-1",
        "o.cmd.schedule.agent-1",
    }
    assert not may_publish(mine, "o.cmd.executor.agent-2")


def test_each_role_reads_replies_on_its_own_inboxes_only() -> None:
    for role in roles.SERVICES:
        inboxes = [s for s in role.grant.subscribe if s.startswith("_INBOX")]
        assert inboxes in ([], [f"_INBOX.{role.name}.>"]), role.name


def test_the_server_configuration_lists_public_keys_and_no_secret(tmp_path: Path) -> None:
    creds = Credentials(tmp_path / "keys")
    creds.ensure()
    creds.add_publisher("partner", ["agent-1"])
    text = authorization(creds.users())
    seeds = [p.read_text().strip() for p in (tmp_path / "keys").rglob("*.nk")]
    assert len(seeds) == len(ROLES) + 1
    assert not any(seed in text for seed in seeds)
    assert text.count("nkey:") == len(seeds)
    assert '"o.cmd.executor.agent-1"' in text
    # Seeds are readable by their owner only.
    assert {p.stat().st_mode & 0o777 for p in (tmp_path / "keys").rglob("*.nk")} == {0o600}
    assert (tmp_path / "keys").stat().st_mode & 0o777 == 0o700

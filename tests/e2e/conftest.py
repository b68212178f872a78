"""The five service processes, supervised, against real NATS/Postgres and a local
server speaking the OpenAI wire protocol."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from letta_client import Letta

from o_devtools.health import wait_healthy
from o_devtools.ports import free_port
from o_devtools.supervisor import ServiceSpec, Supervisor, with_identities
from o_setup import apply_topology
from tests.e2e.callback_receiver import CALLBACK_SECRET
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.exa_server import FakeExa
from tests.fakes.exa_server import serving as exa_serving
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.wheels import make_wheel

if TYPE_CHECKING:
    from tests.e2e.mcp_server import Served

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("gateway", "executor", "memory", "tool_sandbox", "evolution")
SECRETS_KEY = "ZmDfcTF7_60GrrY167zsiPd67pEvs0aGOv2oasOM1Pg="
EXECUTOR_REPLICAS = 2
# The tests' own package, installable by tools that name it in pip_requirements.
GREETING_MODULE = "def greeting(name):\n    return f'hello, {name}'\n"


# A page on another origin calls the API from a real browser (test_console_browser.py):
# its origin is allowed as Letta's own ACCEPTABLE_ORIGINS adds one to the defaults.
OTHER_ORIGIN_PORT = free_port()


@dataclass
class System:
    base_url: str
    supervisor: Supervisor
    llm: FakeOpenAI
    http: httpx.AsyncClient
    env: dict[str, str]

    def client(self) -> Letta:
        return Letta(base_url=self.base_url, api_key="test-key")


@pytest.fixture(scope="session")
def fake_llm() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_anthropic() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_exa() -> Iterator[FakeExa]:
    with exa_serving() as fake:
        yield fake


@pytest.fixture
def exa(fake_exa: FakeExa) -> Iterator[FakeExa]:
    fake_exa.reset()
    yield fake_exa
    fake_exa.reset()


def _package_folders() -> tuple[Path, Path]:
    """Tools' packages (test_tool_packages.py): the real pip installs the tests' own wheel
    from a folder, with no index; the sets go to a folder the tools' uids can read."""
    wheels = Path(tempfile.mkdtemp(prefix="o-e2e-wheels-"))
    make_wheel(wheels, "otestgreeting", "1.0", GREETING_MODULE)
    packages = Path(tempfile.mkdtemp(prefix="o-e2e-packages-"))
    packages.chmod(0o755)
    return wheels, packages


@pytest.fixture(scope="session")
async def system(
    servers,
    fake_llm: FakeOpenAI,
    fake_anthropic: FakeAnthropic,
    fake_exa: FakeExa,
    tmp_path_factory,
) -> AsyncIterator[System]:  # type: ignore[no-untyped-def]
    import asyncpg

    from tests.conftest import _with_database

    name = "e2e"
    admin = await asyncpg.connect(servers.database_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    port = free_port()
    root = ROOT
    wheels, packages = _package_folders()
    env = {
        **os.environ,
        # The services import this checkout's code (also from a git worktree).
        "PYTHONPATH": os.pathsep.join(str(root / p) for p in ("contracts", "services", ".")),
        "NATS_URL": servers.nats_url,
        "DATABASE_URL": _with_database(servers.database_url, name),
        "OPENAI_BASE_URL": fake_llm.base_url,
        "OPENAI_API_KEY": "sk-test",
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
        # A user-named OpenAI-compatible provider ("lab/<model>"), served by the same fake.
        "O_PROVIDER_LAB_BASE_URL": fake_llm.base_url,
        "O_PROVIDER_LAB_API_KEY": "lab-key",
        # Retries of 5xx answers back off briefly in tests.
        "O_LLM_BACKOFF": "0.02",
        # Pings while a streamed run is idle come quickly (tests hold runs on purpose).
        "O_STREAM_PING_SECONDS": "0.3",
        "O_HTTP_PORT": str(port),
        "O_API_KEY": "test-key",
        "O_LOG_LEVEL": "WARNING",
        # Tool secrets are encrypted under this key (gateway) and decrypted in the sandbox.
        "O_SECRETS_KEY": SECRETS_KEY,
        # The tests' MCP servers listen on 127.0.0.1, which O refuses unless allowed.
        "O_MCP_ALLOW_PRIVATE_URLS": "1",
        # So do providers registered through the API (test_providers.py's is local).
        "O_PROVIDERS_ALLOW_PRIVATE_URLS": "1",
        # A stdio MCP server's call that gets no answer ends this soon (test_mcp_stdio.py).
        "O_MCP_STDIO_CALL_SECONDS": "4",
        # The web tools (test_web_tools.py): Exa is a local fake, and fetch_webpage may
        # read the tests' site on 127.0.0.1 (not their "internal" server on 127.0.0.2).
        "O_EXA_BASE_URL": fake_exa.url,
        "O_WEB_ALLOWED_TARGETS": "127.0.0.1",
        "EXA_API_KEY": "",  # (no server-wide key: an agent brings its own)
        # Longer than the default on purpose: a killed process's commands are taken over
        # at once (o_runtime/takeover.py), and the tests that kill executors, the memory
        # service (mid-file) and gateways (mid-callback) show it; none waits for an ack_wait.
        "O_EXECUTOR_ACK_WAIT": "10",
        # A command that fails on its own is tried again after 0.2, 0.4, 0.8, 1.6 s before
        # its fifth failure dead-letters it (2, 4, 8, 16 s by default: test_ops_dead_letters.py
        # and test_poison.py wait for dead letters).
        "O_FAILURE_RETRY_DELAY": "0.2",
        # A reply waits this long for the sleep-time decision on its turn (default 2 s), so
        # that on a loaded machine the reply still names the companion runs it started
        # (test_sleeptime.py checks each reply against the runs listed).
        "O_SLEEPTIME_TURN_WAIT": "10",
        # An agent waits this long for another's reply (test_multi_agent.py waits it out).
        "O_AGENT_REPLY_TIMEOUT": "10",
        # Folders: a small upload limit (test_folders.py goes over it), small embedding
        # batches (many steps).
        "O_MAX_FILE_BYTES": str(512 * 1024),
        "O_FILE_EMBED_BATCH": "4",
        # Completion callbacks (test_callbacks.py): signed with a secret the tests know, to a
        # receiver on 127.0.0.1 (refused unless allowed), retried quickly.
        "O_CALLBACK_SECRET": CALLBACK_SECRET,
        "O_CALLBACK_ALLOWED_TARGETS": "127.0.0.1",
        "O_CALLBACK_RETRY_INITIAL": "0.2",
        "O_CALLBACK_RETRY_MAX_DELAY": "1",
        "O_CALLBACK_RETRY_FOR": "60",
        "ACCEPTABLE_ORIGINS": f"http://127.0.0.1:{OTHER_ORIGIN_PORT}",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        "O_SANDBOX_PACKAGES_DIR": str(packages),
    }
    # The durable consumers with this system's settings (O_EXECUTOR_ACK_WAIT): the setup
    # role's work, as a deployment's setup Job does it.
    await apply_topology(env["NATS_URL"], servers.identity("setup"), env)
    # Two executor replicas: every e2e test also checks that runs work across them. Each
    # service connects as its own role (O_NATS_NKEY), as it is deployed.
    supervisor = Supervisor(
        with_identities(
            [
                ServiceSpec.module(
                    s,
                    f"o_{s}",
                    replicas=EXECUTOR_REPLICAS if s == "executor" else 1,
                    # As `make run` keeps them (O_SPARES): test_fast_takeover.py promotes
                    # each.
                    spare=s in ("executor", "gateway"),
                )
                for s in SERVICES
            ],
            servers.seed_file,
        ),
        env,
        backoff_initial=0.2,
        # The suite kills executors many times a minute on purpose (test_durable_runs.py and
        # others); with the default (a replica stable only after 30 s, waits doubling to 30 s)
        # the ninth kill in a row waited out a test's whole deadline. The backoff itself is
        # tested in tests/integration/test_embedded_and_supervisor.py.
        backoff_max=1.0,
    )
    await supervisor.start()
    base_url = f"http://127.0.0.1:{port}"
    http = httpx.AsyncClient(
        base_url=base_url, headers={"Authorization": "Bearer test-key"}, timeout=60
    )
    try:
        await wait_healthy(http)
        yield System(base_url, supervisor, fake_llm, http, env)
    finally:
        await http.aclose()
        await supervisor.stop()
        shutil.rmtree(wheels, ignore_errors=True)
        shutil.rmtree(packages, ignore_errors=True)


@pytest.fixture
def claude(system: System, fake_anthropic: FakeAnthropic) -> Iterator[FakeAnthropic]:
    fake_anthropic.reset()
    yield fake_anthropic
    fake_anthropic.reset()


@pytest.fixture
def llm(system: System) -> Iterator[FakeOpenAI]:
    system.llm.reset()
    yield system.llm
    system.llm.reset()


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[Served]:
    """The tests' MCP servers (tests/e2e/mcp_server.py), started once per test module that
    asks for them. (Imported here, not above: they need the `mcp` package, which the
    modules using them check for first.)"""
    from tests.e2e.mcp_server import served

    with served() as server:
        yield server

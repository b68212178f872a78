"""docker-compose.yml's key handling, run as written without a Docker engine.

No Docker engine exists where the tests run, so `deploy/validate.sh` checks the compose file
offline only. What its containers do with NATS keys is plain commands, though, and this runs
them as the file has them: the `nats-keys` service's script (each volume a folder here), the
`nats` service's server on the configuration that script wrote, the `o-setup` service's
command with its key, then each service's key, from the volume it is given, at the door.
So a change to the script, the roles or the key commands that would break `docker compose up`
at its first start fails here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from o_contracts import subjects
from o_devtools.embedded import _nats_server_executable
from o_devtools.ports import free_port
from o_runtime.nats_identity import Identity

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
# The services that run O's code with a key of their own (o_setup/roles.py).
ROLES = ("gateway", "executor", "memory", "evolution", "tool_sandbox")


class Container:
    """A compose service's view of the files: its root a folder here, each mount point in it a
    link to the folder standing for its named volume."""

    def __init__(self, service: str, volumes: Path) -> None:
        self.spec = SERVICES[service]
        self.root = volumes.parent / "containers" / service
        self.tops: set[str] = set()
        for mount in self.spec.get("volumes", []):
            name, target = mount.split(":")[:2]
            (volumes / name).mkdir(exist_ok=True)
            link = self.root / target.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(volumes / name)
            self.tops.add("/" + target.strip("/").split("/")[0])

    def paths(self, text: str) -> str:
        """`text` with the container's paths under its root (a script may name `/out/$role`,
        not only the mount points themselves)."""
        for top in self.tops:
            text = re.sub(rf"(?<![\w./-]){re.escape(top)}(?=[/\s]|$)", f"{self.root}{top}", text)
        return text

    def env(self, nats_url: str) -> dict[str, str]:
        """Its environment as compose gives it, paths under its root, NATS here."""
        given = {k: self.paths(str(v)) for k, v in (self.spec.get("environment") or {}).items()}
        return {
            **os.environ,
            **given,
            "NATS_URL": nats_url,
            "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("contracts", "services")),
        }


@pytest.fixture
def volumes(tmp_path: Path) -> Path:
    folder = tmp_path / "volumes"
    folder.mkdir()
    return folder


def run_nats_keys(volumes: Path) -> None:
    """The `nats-keys` service's command (run as root there): its script, `python` this
    interpreter; unless we are root, `chown` a no-op (the containers' owner ids mean nothing
    here) and `cp` forced."""
    shell, flags, script = SERVICES["nats-keys"]["command"]
    assert (shell, flags) == ("sh", "-ec")
    box = Container("nats-keys", volumes)
    prelude = f'python() {{ {shlex.quote(sys.executable)} "$@"; }}\n'
    if os.geteuid() != 0:
        # (and a copy over a 0400 file, which root may overwrite, replaces it instead)
        prelude += 'chown() { :; }\ncp() { command cp -f "$@"; }\n'

    body = box.paths(script.replace("$$", "$"))
    subprocess.run(
        [shell, flags, prelude + body], env=box.env("nats://unused:4222"), check=True, timeout=120
    )
    shutil.rmtree(box.root)  # (the next run makes its links again)


@pytest.fixture
def nats_server(volumes: Path, tmp_path: Path) -> Iterator[str]:
    """The `nats` service's server, on the configuration `nats-keys` wrote."""
    run_nats_keys(volumes)
    box = Container("nats", volumes)
    port = free_port()
    # Here on loopback and free ports (the container's monitoring port is its healthcheck's).
    args = [box.paths(a) for a in SERVICES["nats"]["command"] if not a.startswith("--http_port")]
    args += ["--addr", "127.0.0.1", "--port", str(port), "--http_port", str(free_port())]
    log = (tmp_path / "nats.log").open("wb")
    proc = subprocess.Popen(
        [_nats_server_executable(), *args], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        _wait_listening(port, proc)
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(200):
        assert proc.poll() is None, "nats-server exited on compose's configuration"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                if s.recv(4) == b"INFO":
                    return
        except OSError:
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.05)  # (a pause that ends early if the server dies)
    raise TimeoutError("nats-server did not listen")


@pytest.fixture
async def connections() -> AsyncIterator[list[Any]]:
    opened: list[Any] = []
    yield opened
    for nc in opened:
        await nc.close()


def test_the_key_script_gives_each_role_its_own_seed_readable_by_its_owner_only(
    volumes: Path,
) -> None:
    run_nats_keys(volumes)
    kept = sorted(p.stem for p in (volumes / "nats-keys").glob("*.nk"))
    assert kept == sorted(("operator", "setup", *ROLES))
    for role in ("setup", *ROLES):
        given = list((volumes / f"nats-key-{role}").iterdir())
        # Its own seed and nothing else: no service can act as another role.
        assert [p.name for p in given] == [f"{role}.nk"], role
        assert stat.S_IMODE(given[0].stat().st_mode) == 0o400
        assert given[0].read_text() == (volumes / "nats-keys" / f"{role}.nk").read_text()
    config = (volumes / "nats-auth" / "authorization.conf").read_text()
    # Public keys only: no seed reaches the server's volume.
    assert not any(p.read_text().strip() in config for p in (volumes / "nats-keys").glob("*.nk"))
    # Made once and kept: a second start (docker compose up again) changes no key.
    before = {p.name: p.read_text() for p in (volumes / "nats-keys").glob("*.nk")}
    run_nats_keys(volumes)
    assert {p.name: p.read_text() for p in (volumes / "nats-keys").glob("*.nk")} == before


async def test_the_server_admits_each_service_by_the_key_compose_gives_it_and_no_one_else(
    volumes: Path, nats_server: str, connections: list[Any]
) -> None:
    # o-setup, with its key from its volume, makes the topology.
    setup_env = Container("o-setup", volumes).env(nats_server)
    assert Identity.of("setup", setup_env).seed is not None  # (read from its volume)
    ran = await asyncio.create_subprocess_exec(
        *(sys.executable if a == "python" else a for a in SERVICES["o-setup"]["command"]),
        env=setup_env,
    )
    assert await asyncio.wait_for(ran.wait(), 120) == 0

    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    with pytest.raises(Exception):  # noqa: B017  (nats-py's kinds vary; the reason:)
        await nats.connect(nats_server, error_cb=on_error, allow_reconnect=False)
    assert any("authorization violation" in e.lower() for e in errors), errors

    for role in ROLES:
        service = role.replace("_", "-")  # (compose's name for it)
        identity = Identity.of(role, Container(service, volumes).env(nats_server))
        assert identity.seed is not None, role
        errors.clear()
        nc = await nats.connect(
            nats_server, allow_reconnect=False, error_cb=on_error, **identity.options()
        )
        connections.append(nc)
        if role == "tool_sandbox":
            # Users' code runs there: no JetStream at all (the request is refused by the
            # server, so no answer comes).
            with pytest.raises(nats.errors.TimeoutError):
                await nc.jetstream(timeout=1).stream_info(subjects.EVENTS_STREAM)
            assert any("permissions violation" in e.lower() for e in errors), errors
        else:
            info = await nc.jetstream().stream_info(subjects.EVENTS_STREAM)
            assert info.config.name == subjects.EVENTS_STREAM, role

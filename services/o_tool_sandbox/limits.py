"""The sandbox's settings: the limits every tool run is held to, and the service's own
(read once at start; o_runtime/env.py validates them). Defaults fit a small tool."""

from __future__ import annotations

from dataclasses import dataclass

from o_runtime.env import BadSetting, Env

MB = 1 << 20


@dataclass(frozen=True)
class Limits:
    timeout: float  # wall clock, seconds (a command may ask for less)
    cpu_seconds: int
    memory_bytes: int
    file_bytes: int
    processes: int
    open_files: int
    output_keep: int  # bytes of stdout/stderr kept for the model
    output_max: int  # bytes after which the tool is stopped
    pool_size: int  # warm workers kept ready

    @classmethod
    def from_env(cls, env: Env | None = None) -> Limits:
        env = env or Env()
        return cls(
            timeout=env.number("O_SANDBOX_TIMEOUT", 60.0, minimum=0.1),
            cpu_seconds=env.integer("O_SANDBOX_CPU_SECONDS", 30, minimum=1),
            memory_bytes=env.integer("O_SANDBOX_MEMORY_MB", 512, minimum=16) * MB,
            file_bytes=env.integer("O_SANDBOX_FILE_MB", 16, minimum=1) * MB,
            processes=env.integer("O_SANDBOX_PROCESSES", 32, minimum=1),
            open_files=env.integer("O_SANDBOX_OPEN_FILES", 64, minimum=16),
            output_keep=env.integer("O_SANDBOX_OUTPUT_KEEP", 64 * 1024, minimum=1024),
            output_max=env.integer("O_SANDBOX_OUTPUT_MAX_MB", 8, minimum=1) * MB,
            pool_size=env.integer("O_SANDBOX_POOL", 4, minimum=0),
        )

    def worker_config(self) -> dict[str, int]:
        return {
            "cpu_seconds": self.cpu_seconds,
            "memory_bytes": self.memory_bytes,
            "file_bytes": self.file_bytes,
            "processes": self.processes,
            "open_files": self.open_files,
        }


# Ports a tool may connect to when the operator lets tools out and names none (the web's).
WEB_PORTS = (80, 443)


@dataclass(frozen=True)
class NetworkAccess:
    """Whether users' tools may reach the network, and on which TCP ports.

    `O_SANDBOX_NETWORK`: off (the default: no network namespace interface, no socket at
    all); `1` (TCP to ports 80 and 443, DNS); a list of ports (`443,8443`); or `any` (every
    TCP port). Even let out, a tool may open only IPv4 and IPv6 sockets (no Unix, netlink or
    raw ones), and, where Landlock covers TCP (ABI 4+), connect only to the ports named:
    so not to NATS, Postgres or O's gateway on their ports (docs/sandbox.md, "Network").
    """

    enabled: bool = False
    # None: any port.
    ports: tuple[int, ...] | None = WEB_PORTS

    @classmethod
    def parse(cls, raw: str | None) -> NetworkAccess:
        value = (raw or "").strip().lower()
        if value in ("", "0", "off", "false", "no"):
            return cls(enabled=False)
        if value in ("1", "on", "true", "yes"):
            return cls(enabled=True)
        if value == "any":
            return cls(enabled=True, ports=None)
        try:
            ports = tuple(sorted({int(p) for p in value.split(",") if p.strip()}))
        except ValueError:
            ports = ()
        if not ports or not all(0 < p < 65536 for p in ports):
            raise BadSetting(
                "O_SANDBOX_NETWORK must be 0, 1, any or a list of TCP ports (443,8443),"
                f" not {raw!r}"
            )
        return cls(enabled=True, ports=ports)

    def worker_config(self) -> dict[str, object]:
        return {"enabled": self.enabled, "ports": list(self.ports) if self.ports else None}

    def describe(self) -> str:
        if not self.enabled:
            return "off"
        where = (
            "any TCP port"
            if self.ports is None
            else "TCP ports " + ",".join(str(p) for p in self.ports)
        )
        return f"IPv4/IPv6 to {where} (O_SANDBOX_NETWORK)"


@dataclass(frozen=True)
class PackageSettings:
    """Installing the packages tools import (`pip_requirements`): on unless
    `O_SANDBOX_PACKAGES=0`; each set of requirements once, under `O_SANDBOX_PACKAGES_DIR`,
    all of them within `O_SANDBOX_PACKAGES_MAX_MB`."""

    enabled: bool = True
    # None: a folder of this user's under the system's temporary folder.
    root: str | None = None
    install_timeout: float = 300.0
    # What all sets may take together (the least recently used go past it).
    max_bytes: int = 4096 * MB

    @classmethod
    def from_env(cls, env: Env) -> PackageSettings:
        return cls(
            enabled=env.flag("O_SANDBOX_PACKAGES", default=True),
            root=env.optional("O_SANDBOX_PACKAGES_DIR"),
            install_timeout=env.number("O_SANDBOX_PACKAGES_TIMEOUT", 300.0, minimum=1),
            max_bytes=env.integer("O_SANDBOX_PACKAGES_MAX_MB", 4096, minimum=1) * MB,
        )


@dataclass(frozen=True)
class SandboxSettings:
    limits: Limits
    # Calls one replica runs at once.
    concurrency: int = 8
    # Tools run as uids from here on (root only): one per live worker.
    uid_base: int = 61000
    # The interpreter workers run (else this one, or the system's).
    python: str | None = None
    network: NetworkAccess = NetworkAccess()
    packages: PackageSettings = PackageSettings()

    @classmethod
    def from_env(cls, env: Env) -> SandboxSettings:
        return cls(
            limits=Limits.from_env(env),
            concurrency=env.integer("O_SANDBOX_CONCURRENCY", 8, minimum=1),
            uid_base=env.integer("O_SANDBOX_UID_BASE", 61000, minimum=1000),
            python=env.optional("O_SANDBOX_PYTHON"),
            network=NetworkAccess.parse(env.optional("O_SANDBOX_NETWORK")),
            packages=PackageSettings.from_env(env),
        )

"""The interpreter that runs the tests' stdio MCP server (mcp_stdio_server.py), and where it
finds the `mcp` SDK.

Under root the sandbox runs the server as a uid of its own, so the interpreter is the one the
sandbox chooses for tools: one whose standard library any user can read
(o_tool_sandbox/interpreter.py). When that is the Python the tests run on, the server imports
`mcp` from the tests' own virtualenv. When it is not (the suite on a pyenv 3.13 under /root,
the sandbox on Debian's 3.11), that virtualenv's compiled packages (pydantic_core) do not load
in it, so the same versions of `mcp` and its dependencies are installed once for the
sandbox's version into a world-readable folder under the temporary directory, with pip's
cross-version install (`--target --python-version`, wheels only) and compiled by that
interpreter: about 15 s the first time on a machine, kept for the next runs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from o_tool_sandbox import interpreter


def _version(python: str) -> tuple[int, int]:
    out = subprocess.run(
        [python, "-I", "-S", "-c", "import sys; print(*sys.version_info[:2])"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    major, minor = out.stdout.split()
    return int(major), int(minor)


def _pins() -> list[str]:
    """This virtualenv's distributions, as pip constraints: the server gets the same versions."""
    pins = {
        d.metadata["Name"].lower(): f"{d.metadata['Name']}=={d.version}"
        for d in importlib.metadata.distributions()
        if d.metadata["Name"] and d.metadata["Name"].lower() != "o-server"
    }
    return sorted(pins.values())


def _install(python: str, version: tuple[int, int]) -> Path:
    pins = _pins()
    mcp = importlib.metadata.version("mcp")
    key = hashlib.sha256("\n".join(pins).encode()).hexdigest()[:12]
    target = Path(tempfile.gettempdir()) / f"o-test-mcp-{mcp}-py{version[0]}{version[1]}-{key}"
    if target.is_dir():
        return target
    building = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
    try:
        constraints = building / "constraints.txt"
        constraints.write_text("\n".join(pins) + "\n")
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
                *("--target", str(building / "site"), "--only-binary=:all:", "--no-compile"),
                *("--python-version", f"{version[0]}.{version[1]}"),
                *("-c", str(constraints), f"mcp=={mcp}"),
            ],
            check=True,
            timeout=300,
        )
        site = building / "site"
        # Bytecode for the interpreter that runs the server (its uid cannot write any).
        subprocess.run([python, "-m", "compileall", "-q", str(site)], check=True, timeout=300)
        site.chmod(0o755)  # mkdtemp's folder is private; a uid of the sandbox's reads it
        # Whole or not at all: another test process may be building the same one.
        with contextlib.suppress(OSError):
            site.rename(target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


@functools.cache
def server_python() -> tuple[str, str]:
    """(the interpreter, its PYTHONPATH with `mcp`) for the tests' stdio MCP server."""
    import mcp

    python = interpreter.choose(unprivileged=os.geteuid() == 0)[0]
    version = _version(python)
    if version == sys.version_info[:2]:
        return python, str(Path(mcp.__file__).resolve().parents[1])
    return python, str(_install(python, version))

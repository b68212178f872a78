"""Telling the sandbox which packages tools will need, so the first call that names a set
does not wait for pip (`o.rpc.sandbox.prepare`; docs/sandbox.md, "Packages").

The set is the one a run will name: the tool's requirements and the local sandbox
configuration's (o_runtime/sandbox_settings.py), so the sandbox installs the very folder the
call will look for. Only a hint, sent without waiting: a sandbox that misses it installs the
set at the first call."""

from __future__ import annotations

from collections.abc import Sequence

from o_contracts import subjects
from o_contracts.pip_requirements import PipRequirement
from o_contracts.requests import PreparePackages
from o_gateway.state import Gateway
from o_runtime.sandbox_settings import local_sandbox


async def prepare_packages(gw: Gateway, tool_requirements: Sequence[PipRequirement]) -> None:
    wanted = (await local_sandbox(gw.pool)).packages(tool_requirements)
    if wanted:
        hint = PreparePackages(requirements=wanted)
        await gw.eventlog.nc.publish(subjects.SANDBOX_PREPARE, hint.encode())

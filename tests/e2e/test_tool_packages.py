"""A tool's packages end to end: `pip_requirements` through Letta's API (the official
client), installed by the sandbox with the real pip (from the tests' wheel folder: the
system's PIP_FIND_LINKS, PIP_NO_INDEX), imported by the tool when the model calls it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from letta_client.types import PipRequirementParam

from o_tool_sandbox.packages import COMPLETE
from tests.e2e.conftest import System
from tests.e2e.support import new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

GREET = '''
def greet_with_package(name: str) -> str:
    """Greet someone with the tests' package.

    Args:
        name: Who.
    """
    import otestgreeting
    return otestgreeting.greeting(name)
'''


async def test_a_tools_pip_requirements_are_installed_and_imported(
    system: System, llm: FakeOpenAI
) -> None:
    client = system.client()
    wanted: list[PipRequirementParam] = [{"name": "otestgreeting", "version": "1.0"}]
    tool = await asyncio.to_thread(client.tools.create, source_code=GREET, pip_requirements=wanted)
    assert [(r.name, r.version) for r in tool.pip_requirements or []] == [("otestgreeting", "1.0")]
    agent = await new_agent(system, tool_ids=[tool.id])
    llm.push(Reply(tool_calls=[("greet_with_package", {"name": "Ada"})]), Reply(content="Greeted."))
    result = await send(system, agent["id"], "Greet Ada")
    ret = next(m for m in result["messages"] if m["message_type"] == "tool_return_message")
    assert (ret["status"], ret["tool_return"]) == ("success", "hello, Ada"), ret

    # Taken away (PATCH with []), the package is no longer on the tool's path.
    cleared = await asyncio.to_thread(client.tools.update, tool.id, pip_requirements=[])
    assert cleared.pip_requirements is None
    llm.push(Reply(tool_calls=[("greet_with_package", {"name": "Bo"})]), Reply(content="No."))
    result = await send(system, agent["id"], "Greet Bo")
    ret = next(m for m in result["messages"] if m["message_type"] == "tool_return_message")
    assert ret["status"] == "error"
    assert "No module named 'otestgreeting'" in ret["tool_return"]


async def test_running_source_with_pip_requirements(system: System) -> None:
    response = await system.http.post(
        "/v1/tools/run",
        json={
            "source_code": GREET,
            "args": {"name": "Cy"},
            "pip_requirements": [{"name": "otestgreeting"}],
        },
    )
    assert response.status_code == 200, response.text
    assert (response.json()["status"], response.json()["tool_return"]) == ("success", "hello, Cy")
    # A package pip cannot find is the run's error, saying so.
    response = await system.http.post(
        "/v1/tools/run",
        json={
            "source_code": GREET,
            "args": {"name": "Cy"},
            "pip_requirements": [{"name": "otest-missing", "version": "1.0"}],
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "error"
    assert "pip could not install otest-missing==1.0" in response.json()["tool_return"]


@pytest.mark.parametrize(
    "requirement",
    [
        {"name": "--index-url=http://evil.example/simple"},
        {"name": "git+https://example.com/x.git"},
        {"name": "requests", "version": "1.0; os_name == 'nt'"},
        {"name": "requests", "version": "http://example.com/r.whl"},
        {"name": ""},
    ],
)
async def test_a_requirement_that_is_not_a_package_is_refused(
    system: System, requirement: dict[str, str]
) -> None:
    response = await system.http.post(
        "/v1/tools/", json={"source_code": GREET, "pip_requirements": [requirement]}
    )
    assert response.status_code == 422, response.text
    assert "detail" in response.json()
    listed = (await system.http.get("/v1/tools/", params={"name": "greet_with_package"})).json()
    assert all(t["pip_requirements"] != [requirement] for t in listed)


async def test_health_says_how_tools_get_packages(system: System) -> None:
    health = (await system.http.get("/v1/health/")).json()
    assert health["sandbox"]["packages"].startswith("installed on demand, wheels only")


async def test_an_agent_file_carries_its_tools_pip_requirements(system: System) -> None:
    client = system.client()
    source = GREET.replace("greet_with_package", "greet_in_file")
    tool = await asyncio.to_thread(
        client.tools.create,
        source_code=source,
        pip_requirements=[{"name": "otestgreeting", "version": ">=1.0"}],
    )
    agent = await new_agent(system, tool_ids=[tool.id])
    document = json.loads(await asyncio.to_thread(client.agents.export_file, agent["id"]))
    (exported,) = [t for t in document["tools"] if t["name"] == "greet_in_file"]
    assert exported["pip_requirements"] == [{"name": "otestgreeting", "version": ">=1.0"}]
    # Imported where no tool has its name (renamed here), the tool is made with them.
    renamed = json.dumps(document).replace("greet_in_file", "greet_imported")
    imported = await asyncio.to_thread(
        client.agents.import_file, file=("greeter.af", renamed.encode())
    )
    copy = await asyncio.to_thread(client.agents.retrieve, imported.agent_ids[0])
    (made,) = [t for t in copy.tools if t.name == "greet_imported"]
    assert made.id != tool.id
    assert [(r.name, r.version) for r in made.pip_requirements or []] == [
        ("otestgreeting", ">=1.0")
    ]


async def installed_with(folder: Path, spec: str, within: float = 30.0) -> Path:
    """The set folder whose marker names `spec`, once the sandbox has put it in place."""

    def found() -> Path | None:
        for marker in folder.glob(f"*/{COMPLETE}"):
            if spec in json.loads(marker.read_text())["requirements"]:
                return marker.parent
        return None

    async with asyncio.timeout(within):
        while True:
            done = found()
            if done is not None:
                return done
            await asyncio.sleep(0.05)


async def test_a_tools_packages_are_installed_when_it_is_registered(
    system: System, llm: FakeOpenAI
) -> None:
    source = GREET.replace("greet_with_package", "greet_prepared")
    # (A specifier of its own: a set no other test installed.)
    wanted = [{"name": "otestgreeting", "version": ">=0.9"}]
    tool = await system.http.post(
        "/v1/tools/", json={"source_code": source, "pip_requirements": wanted}
    )
    assert tool.status_code == 200, tool.text
    # Before any call names it, the sandbox has the set: the first call installs nothing.
    folder = await installed_with(Path(system.env["O_SANDBOX_PACKAGES_DIR"]), "otestgreeting>=0.9")
    marker = (folder / COMPLETE).stat().st_mtime_ns
    agent = await new_agent(system, tool_ids=[tool.json()["id"]])
    llm.push(Reply(tool_calls=[("greet_prepared", {"name": "Di"})]), Reply(content="Hi."))
    result = await send(system, agent["id"], "Greet Di")
    ret = next(m for m in result["messages"] if m["message_type"] == "tool_return_message")
    assert (ret["status"], ret["tool_return"]) == ("success", "hello, Di"), ret
    assert (folder / COMPLETE).stat().st_mtime_ns == marker

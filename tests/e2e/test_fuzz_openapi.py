"""A bounded fuzzing pass over the OpenAPI document against the running system (issue 10).

Schemathesis generates requests for every operation from the gateway's own
`/openapi.json`: valid ones (the schema's shapes, ids matching their patterns) and
invalid ones (wrong types, broken patterns, values out of range); once against
ids that name nothing and once against a real agent, block and tool. Every answer
must be below 500; every error a JSON `{"detail": ...}`; every status one the
document lists for the operation; every body the shape the document gives.

It runs through schemathesis' Python API in a thread (its pytest plugin and the
session's async fixtures do not mix), with a fixed seed so that `make test` is
repeatable: `O_FUZZ_EXAMPLES` (examples per operation and mode) and `O_FUZZ_SEED`
explore further.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.e2e.conftest import System
from tests.fakes.openai_server import FakeOpenAI, JSONDict, Reply, echo_reply

pytestmark = pytest.mark.e2e

EXAMPLES = int(os.environ.get("O_FUZZ_EXAMPLES", "8"))
SEED = int(os.environ.get("O_FUZZ_SEED", "10"))
# What a whole pass may take: `make test` stays bounded whatever the machine's speed
# (a slow machine fuzzes less; the test still needs MIN_REQUESTS answers).
BUDGET_SECONDS = float(os.environ.get("O_FUZZ_BUDGET_SECONDS", "40"))
MIN_REQUESTS = 200
# Operations that change or delete the resources given as real ids are fuzzed only
# with ids that name nothing: deleting the real agent would leave nothing to fuzz.
KEEP_REAL = ("delete",)
CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]


@dataclass
class Findings:
    requests: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    out_of_time: bool = False
    # The first answer of each error status, for the summary.
    samples: dict[int, str] = field(default_factory=dict)

    def add(self, problem: str) -> None:
        if len(self.problems) < 40:
            self.problems.append(problem)


def check(case: schemathesis.Case, response: schemathesis.Response, found: Findings) -> None:
    found.requests += 1
    found.statuses[response.status_code] = found.statuses.get(response.status_code, 0) + 1
    where = f"{case.method} {case.formatted_path}"
    if response.status_code >= 400 and response.status_code not in found.samples:
        found.samples[response.status_code] = f"{where}: {response.content[:200]!r}"
    curl = case.as_curl_command(headers={"Authorization": "Bearer test-key"})
    if response.status_code >= 500:
        found.add(f"{where}: {response.status_code} {response.content[:300]!r}\n    {curl}")
        return
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or "detail" not in body:
            found.add(
                f"{where}: {response.status_code} not JSON with detail: {response.content[:200]!r}"
            )
            return
    try:
        case.validate_response(response, checks=CHECKS)
    except (AssertionError, FailureGroup) as exc:
        failures = exc.exceptions if isinstance(exc, FailureGroup) else (exc,)
        text = "; ".join(f"{type(f).__name__}: {f}" for f in failures)
        found.add(f"{where}: {response.status_code} {text[:600]}\n    {curl}")


def fuzz(system: System, real: dict[str, str]) -> Findings:
    auth = {"Authorization": "Bearer test-key"}
    schema = schemathesis.openapi.from_url(f"{system.base_url}/openapi.json", headers=auth)
    session = requests.Session()
    session.headers.update(auth)
    found = Findings()
    deadline = time.monotonic() + BUDGET_SECONDS
    operations = [result.ok() for result in schema.get_all_operations()]
    passes: list[tuple[Any, GenerationMode, dict[str, str]]] = []
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            passes.append((operation, mode, {}))
        names = {p.name for p in operation.path_parameters}
        if names and names <= set(real) and operation.method.lower() not in KEEP_REAL:
            passes.append((operation, GenerationMode.POSITIVE, {n: real[n] for n in names}))
    for operation, mode, path_parameters in passes:
        if time.monotonic() > deadline:
            found.out_of_time = True
            break
        strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=False,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @hypothesis.seed(SEED)
        @hypothesis.given(case=strategy)
        def run(case: schemathesis.Case) -> None:
            if time.monotonic() > deadline:
                return
            response = case.call(base_url=system.base_url, session=session, timeout=30)
            check(case, response, found)

        try:
            run()
        except hypothesis.errors.Unsatisfiable:
            # Nothing to make invalid (an operation with no parameters and no body).
            assert mode is GenerationMode.NEGATIVE, operation.label
    return found


async def real_resources(system: System, llm: FakeOpenAI) -> dict[str, str]:
    """An agent with a block, a passage, a run and its step; a block and a tool of their own."""
    http = system.http
    created = await http.post(
        "/v1/agents/",
        json={
            "model": "openai/gpt-4o-mini",
            "embedding": "openai/text-embedding-3-small",
            "memory_blocks": [{"label": "human", "value": "x"}],
        },
    )
    assert created.status_code == 200, created.text
    agent_id = created.json()["id"]
    block = (await http.post("/v1/blocks/", json={"label": "fuzzed", "value": "v"})).json()
    passage = await http.post(
        f"/v1/agents/{agent_id}/archival-memory", json={"text": "a memory", "importance": 5}
    )
    assert passage.status_code == 200, passage.text
    tool = await http.post(
        "/v1/tools/",
        json={"source_code": FUZZ_TOOL.replace("NAME", f"fuzz_{uuid.uuid4().hex[:8]}")},
    )
    assert tool.status_code == 200, tool.text
    llm.push(Reply(content="hello"))
    sent = await http.post(f"/v1/agents/{agent_id}/messages", json={"input": "hi"})
    assert sent.status_code == 200, sent.text
    message = sent.json()["messages"][0]
    return {
        "agent_id": agent_id,
        "block_id": block["id"],
        "label": "human",
        "memory_id": passage.json()[0]["id"],
        "tool_id": tool.json()["id"],
        "run_id": message["run_id"],
        "step_id": message["step_id"],
        "version": "1",
        "tool_name": "memory_insert",
    }


FUZZ_TOOL = '''
def NAME(text: str) -> str:
    """Echo.

    Args:
        text: What to echo.
    """
    return text
'''


def scripted(body: JSONDict) -> Reply:
    """The model as a fuzzing pass needs it: a forced call is answered with a call (the
    source of a tool when one is asked to be written: generate-tool), the rest echoed. A
    model that ignores a forced call is a 502 (the model's failure, not O's), which is not
    what this pass looks for."""
    tools = body.get("tools") or []
    if body.get("tool_choice") == "required" and tools:
        function = tools[0]["function"]
        if "raw_source_code" in function["parameters"].get("properties", {}):
            written = {
                "raw_source_code": FUZZ_TOOL.replace("NAME", "written"),
                "sample_args_json": '{"text": "x"}',
                "pip_requirements_json": "{}",
            }
            return Reply(tool_calls=[(function["name"], written)])
        return Reply(tool_calls=[(function["name"], {})])
    return echo_reply(body)


async def forget_sandbox_configs(system: System) -> None:
    """The configurations fuzzing made: the local one would reach every later test's tool
    runs (its variables and packages), so none outlives this test."""
    made = (await system.http.get("/v1/sandbox-config/")).json()
    for config in made:
        gone = await system.http.delete(f"/v1/sandbox-config/{config['id']}")
        assert gone.status_code in (204, 404), gone.text


async def test_fuzzing_the_openapi_finds_no_5xx_and_only_json_errors(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = scripted
    real = await real_resources(system, llm)
    started = time.monotonic()
    try:
        found = await asyncio.to_thread(fuzz, system, real)
    finally:
        await forget_sandbox_configs(system)
    took = time.monotonic() - started
    summary = (
        f"{found.requests} requests in {took:.1f} s, statuses {sorted(found.statuses.items())}"
        + (" (stopped at the time budget)" if found.out_of_time else "")
    )
    print(f"\nfuzzing: {summary}")
    for status, sample in sorted(found.samples.items()):
        print(f"  {status} e.g. {sample}")
    assert not found.problems, summary + "\n" + "\n".join(found.problems)
    assert found.requests >= MIN_REQUESTS, summary
    # The system serves on.
    assert (await system.http.get(f"/v1/agents/{real['agent_id']}")).status_code == 200
    assert (await system.http.get(f"/v1/blocks/{real['block_id']}")).status_code == 200

"""Identities (Letta's `/v1/identities/`): made, found by Letta's filters, changed as Letta
changes them (PATCH merges, PUT replaces, upsert), attached to agents and blocks from both
sides and through the official client's agent routes and fields, deleted; bad requests
refused with nothing appended."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from o_contracts import subjects
from tests.e2e.conftest import System
from tests.e2e.support import connected, event_types, new_agent
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.e2e


def prop(key: str, value: Any, kind: str = "string") -> dict[str, Any]:
    return {"key": key, "value": value, "type": kind}


async def made(system: System, **body: Any) -> dict[str, Any]:
    response = await system.http.post("/v1/identities/", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_identities_found_changed_and_attached_as_letta_does(
    system: System, llm: FakeOpenAI
) -> None:
    http = system.http
    # (Other tests, the API's fuzzing among them, make identities in the same system.)
    u = uuid.uuid4().hex[:8]
    count_before = (await http.get("/v1/identities/count")).json()
    caren = await made(
        system,
        identifier_key=f"id-123-{u}",
        name=f"Caren-{u}",
        identity_type="user",
        properties=[prop("age", "28")],
    )
    other = await made(
        system, identifier_key=f"id-456-{u}", name=f"caren-{u} two", identity_type="user"
    )
    acme = await made(system, identifier_key=f"id-123-{u}", name="Acme", identity_type="org",
                      project_id=f"proj-{u}")  # fmt: skip
    assert caren["id"].startswith("identity-") and caren["project_id"] is None
    assert caren["properties"] == [prop("age", "28")] and caren["agent_ids"] == []
    assert caren["organization_id"].startswith("org-")

    async def listed(**params: Any) -> list[str]:
        response = await http.get("/v1/identities/", params=params)
        assert response.status_code == 200, response.text
        return [i["id"] for i in response.json()]

    # Letta's filters: any part of the name in any case, the exact key, the type, the project.
    assert set(await listed(name=f"CAREN-{u}")) == {caren["id"], other["id"]}
    assert set(await listed(identifier_key=f"id-123-{u}")) == {caren["id"], acme["id"]}
    assert await listed(identity_type="org", identifier_key=f"id-123-{u}") == [acme["id"]]
    assert await listed(project_id=f"proj-{u}") == [acme["id"]]
    assert (await listed(order="desc", limit=2)) == [acme["id"], other["id"]]
    assert (await http.get("/v1/identities/count")).json() == count_before + 3

    # PATCH merges properties by key and adds agents; PUT .../properties replaces them.
    one, two = await new_agent(system), await new_agent(system)
    patched = await http.patch(
        f"/v1/identities/{caren['id']}",
        json={"properties": [prop("age", 29, "number"), prop("email", "c@x.io")],
              "agent_ids": [one["id"]]},
    )  # fmt: skip
    assert patched.status_code == 200, patched.text
    assert patched.json()["properties"] == [prop("age", 29, "number"), prop("email", "c@x.io")]
    assert patched.json()["agent_ids"] == [one["id"]]
    replaced = await http.put(
        f"/v1/identities/{caren['id']}/properties", json=[prop("vip", True, "boolean")]
    )
    assert replaced.json()["properties"] == [prop("vip", True, "boolean")], replaced.text
    # Upsert: the identity with that key made as the body says (the same id), or made.
    upserted = await http.put(
        "/v1/identities/",
        json={"identifier_key": f"id-456-{u}", "name": "Caren B", "identity_type": "other",
              "properties": []},
    )  # fmt: skip
    assert upserted.json()["id"] == other["id"] and upserted.json()["name"] == "Caren B"
    fresh = await http.put(
        "/v1/identities/",
        json={"identifier_key": f"id-789-{u}", "name": "New", "identity_type": "user"},
    )
    assert fresh.status_code == 200 and fresh.json()["id"] not in {caren["id"], other["id"]}

    # Through the official client: an agent made with identities, attached, filtered.
    def client_side() -> dict[str, Any]:
        client = system.client()
        made_with = client.agents.create(
            name="served",
            model="openai/gpt-4o-mini",
            embedding="openai/text-embedding-3-small",
            identity_ids=[other["id"]],
        )
        client.agents.identities.attach(other["id"], agent_id=two["id"])
        return {
            "made": made_with,
            "by_key": [a.id for a in client.agents.list(identifier_keys=[f"id-456-{u}"])],
            "by_id": [a.id for a in client.agents.list(identity_id=other["id"])],
            "two": client.agents.retrieve(two["id"]),
        }

    r = await asyncio.to_thread(client_side)
    assert r["made"].identity_ids == [other["id"]]
    assert [i.name for i in r["made"].identities] == ["Caren B"]
    assert set(r["by_key"]) == set(r["by_id"]) == {r["made"].id, two["id"]}
    assert r["two"].identity_ids == [other["id"]]
    served = (await http.get(f"/v1/identities/{other['id']}/agents")).json()
    assert {a["id"] for a in served} == {r["made"].id, two["id"]}
    counted = await http.get("/v1/agents/count", params={"identifier_keys": [f"id-456-{u}"]})
    assert counted.json() == 2
    # Both filters: one identity must be that one and have one of the keys (as in Letta).
    both = {"identity_id": other["id"], "identifier_keys": [f"id-123-{u}"]}
    assert (await http.get("/v1/agents/", params=both)).json() == []
    both["identifier_keys"] = [f"id-123-{u}", f"id-456-{u}"]
    assert len((await http.get("/v1/agents/", params=both)).json()) == 2

    # Blocks: attached from the block's side, found by the identity.
    block_id = one["memory"]["blocks"][0]["id"]
    attached = await http.patch(f"/v1/blocks/{block_id}/identities/attach/{caren['id']}")
    assert attached.status_code == 200 and attached.json()["id"] == block_id, attached.text
    assert [b["id"] for b in (await http.get(f"/v1/identities/{caren['id']}/blocks")).json()] == [
        block_id
    ]
    by_identity = await http.get("/v1/blocks/", params={"identity_id": caren["id"]})
    assert [b["id"] for b in by_identity.json()] == [block_id]

    # An agent's update replaces its identities; detaching takes one off.
    cleared = await http.patch(f"/v1/agents/{r['made'].id}", json={"identity_ids": []})
    assert cleared.json()["identity_ids"] == [], cleared.text
    detached = await http.patch(f"/v1/agents/{two['id']}/identities/detach/{other['id']}")
    assert detached.status_code == 200 and detached.json() is None
    assert (await http.get(f"/v1/identities/{other['id']}")).json()["agent_ids"] == []

    # A deleted agent leaves its identities; a deleted identity leaves its agents.
    assert (await http.delete(f"/v1/agents/{one['id']}")).status_code == 200
    assert (await http.get(f"/v1/identities/{caren['id']}")).json()["agent_ids"] == []
    deleted = await http.delete(f"/v1/identities/{caren['id']}")
    assert deleted.status_code == 200 and deleted.json() is None
    assert (await http.get(f"/v1/identities/{caren['id']}")).status_code == 404
    assert (await http.get(f"/v1/blocks/{block_id}")).status_code in (200, 404)

    async with connected(system) as nc:
        history = [t for _, t in await event_types(nc, subjects.identity_subject(caren["id"]))]
    assert history == [
        "IdentityCreated",
        "IdentityUpdated",  # properties merged, an agent added
        "IdentityUpdated",  # properties replaced
        "IdentityUpdated",  # the block attached
        "IdentityDeleted",
    ]


async def test_bad_identity_requests_are_refused_and_append_nothing(
    system: System, llm: FakeOpenAI
) -> None:
    http = system.http
    key = f"kept-{uuid.uuid4().hex[:8]}"
    kept = await made(system, identifier_key=key, name="Kept", identity_type="user")
    agent = await new_agent(system)
    missing = "identity-00000000-0000-4000-8000-000000000000"
    nobody = "agent-00000000-0000-4000-8000-000000000000"
    agents_before = (await http.get("/v1/agents/count")).json()
    async with connected(system) as nc:
        before = await event_types(nc, subjects.identity_subject(kept["id"]))
    cases = [
        (await http.post("/v1/identities/", json={"name": "x", "identity_type": "user"}), 422),
        (
            await http.post(
                "/v1/identities/",
                json={"identifier_key": "k", "name": "x", "identity_type": "robot"},
            ),
            422,
        ),
        (
            await http.post(
                "/v1/identities/",
                json={"identifier_key": key, "name": "again", "identity_type": "user"},
            ),
            409,
        ),
        (
            await http.post(
                "/v1/identities/",
                json={
                    "identifier_key": "k2",
                    "name": "x",
                    "identity_type": "user",
                    "agent_ids": [nobody],
                },
            ),
            404,
        ),
        (
            await http.post(
                "/v1/identities/",
                json={
                    "identifier_key": "k3",
                    "name": "x",
                    "identity_type": "user",
                    "properties": [{"key": "a", "value": 1, "type": "shape"}],
                },
            ),
            422,
        ),
        (await http.get(f"/v1/identities/{missing}"), 404),
        (await http.get("/v1/identities/identity-xyz"), 422),
        (await http.patch(f"/v1/identities/{missing}", json={"name": "y"}), 404),
        (await http.patch(f"/v1/identities/{kept['id']}", json={"agent_ids": [nobody]}), 404),
        (await http.put(f"/v1/identities/{kept['id']}/properties", json={"key": "a"}), 422),
        (await http.delete(f"/v1/identities/{missing}"), 404),
        (await http.patch(f"/v1/agents/{agent['id']}/identities/attach/{missing}"), 404),
        (await http.patch(f"/v1/agents/{nobody}/identities/attach/{kept['id']}"), 404),
        (
            await http.post(
                "/v1/agents/",
                json={
                    "name": "never",
                    "model": "openai/gpt-4o-mini",
                    "identity_ids": [missing],
                },
            ),
            404,
        ),
    ]
    for response, status in cases:
        assert response.status_code == status, (response.request.url, response.text)
        assert response.json()["detail"], response.text
    async with connected(system) as nc:
        assert await event_types(nc, subjects.identity_subject(kept["id"])) == before
    assert (await http.get("/v1/agents/count")).json() == agents_before
    # Nothing to change is no change: the same name again appends nothing.
    same = await http.patch(f"/v1/identities/{kept['id']}", json={"name": "Kept"})
    assert same.status_code == 200, same.text
    async with connected(system) as nc:
        assert await event_types(nc, subjects.identity_subject(kept["id"])) == before

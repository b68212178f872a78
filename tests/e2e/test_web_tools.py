"""Letta's built-in web tools through the official SDK: `web_search` (Exa, through its real
SDK to a local server speaking Exa's API, tests/fakes/exa_server.py) and `fetch_webpage`
(Exa's contents with a key, else the page fetched by O from where the egress policy lets
it: tests/e2e/web_site.py). Letta Code creates every agent with these two by name.

The scripted model: a user message `tool:NAME {json}` calls NAME with those arguments; a
tool's result is answered `done`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import letta_client
import pytest

from tests.e2e.conftest import System
from tests.e2e.test_multi_agent import call, scripted, tool_return
from tests.e2e.web_site import Site, serving
from tests.fakes.exa_server import FakeExa
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.e2e

WEB = ["web_search", "fetch_webpage"]
KEY = "exa-agent-key-0123"


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with serving() as served:
        yield served


@pytest.fixture
def model(llm: FakeOpenAI) -> FakeOpenAI:
    llm.default_reply = scripted()
    return llm


def web_agent(client: letta_client.Letta, key: str | None = None) -> Any:
    return client.agents.create(
        model="openai/gpt-4o-mini",
        tools=WEB,
        secrets={"EXA_API_KEY": key} if key else None,
    )


def returned(client: letta_client.Letta, agent_id: str, tool: str, **args: Any) -> tuple[str, str]:
    message = tool_return(call(client, agent_id, tool, **args))
    return message.status, message.tool_return


async def test_they_are_letta_builtin_tools_given_by_name(
    system: System, model: FakeOpenAI
) -> None:
    client = system.client()
    for name in WEB:
        (tool,) = client.tools.list(name=name)
        assert (tool.name, tool.tool_type) == (name, "letta_builtin")
    # (Letta Code calls it by its path when a server lacks the tools: the SDK has no method.)
    added = await system.http.post("/v1/tools/add-base-tools")
    assert added.status_code == 200, added.text
    assert set(WEB) <= {t["name"] for t in added.json()}
    agent = web_agent(client)
    assert set(WEB) <= {t.name for t in agent.tools}
    client.agents.messages.create(agent.id, messages=[{"role": "user", "content": "hi"}])
    offered = {t["function"]["name"]: t["function"] for t in model.requests[-1]["tools"]}
    assert set(WEB) <= set(offered)
    assert offered["fetch_webpage"]["parameters"]["required"] == ["url"]
    assert "num_results" in offered["web_search"]["parameters"]["properties"]


async def test_a_search_uses_the_agents_key_and_gives_lettas_fields(
    system: System, model: FakeOpenAI, exa: FakeExa
) -> None:
    exa.keys.add(KEY)
    client = system.client()
    agent = web_agent(client, KEY)
    status, text = returned(
        client,
        agent.id,
        "web_search",
        query="sea otters",
        num_results=2,
        category="news",
        include_domains=["pages.example"],
    )
    assert status == "success", text
    answer = json.loads(text)
    assert answer["query"] == "sea otters"
    assert [r["title"] for r in answer["results"]] == ["sea otters, page 0", "sea otters, page 1"]
    first = answer["results"][0]
    assert first == {
        "title": "sea otters, page 0",
        "url": "https://pages.example/sea%20otters/0",
        "published_date": "2026-11-01T00:00:00.000Z",
        "author": "Author 0",
        "highlights": ["sea otters is mentioned on page 0."],
        "summary": "Page 0 is about sea otters.",
    }
    (sent,) = exa.seen("/search")
    assert sent.headers["x-api-key"] == KEY
    body = sent.body
    assert (body["query"], body["numResults"], body["type"]) == ("sea otters", 2, "auto")
    assert (body["category"], body["includeDomains"]) == ("news", ["pages.example"])
    assert body["contents"]["highlights"]["query"] == "sea otters"
    assert "text" not in body["contents"]


async def test_include_text_brings_each_pages_text(
    system: System, model: FakeOpenAI, exa: FakeExa
) -> None:
    exa.keys.add(KEY)
    client = system.client()
    agent = web_agent(client, KEY)
    status, text = returned(client, agent.id, "web_search", query="kelp", include_text=True)
    assert status == "success", text
    results = json.loads(text)["results"]
    assert len(results) == 3  # (the fake finds three at most; num_results defaults to 10)
    assert results[2]["text"] == "The whole text of page 2 about kelp."
    (sent,) = exa.seen("/search")
    assert (sent.body["numResults"], sent.body["contents"]["text"]) == (10, True)


async def test_a_search_without_a_key_or_refused_tells_the_model_why(
    system: System, model: FakeOpenAI, exa: FakeExa
) -> None:
    client = system.client()
    status, text = returned(client, web_agent(client).id, "web_search", query="otters")
    assert status == "error" and "EXA_API_KEY is not set" in text, text
    assert exa.seen("/search") == []
    # A key Exa refuses: Letta's "Search failed" answer, with Exa's reason.
    status, text = returned(client, web_agent(client, "revoked").id, "web_search", query="otters")
    assert status == "success", text
    answer = json.loads(text)
    assert answer["query"] == "otters" and answer["error"].startswith("Search failed: "), answer
    assert "Invalid API key" in answer["error"]
    # An empty query is answered without asking Exa, as Letta answers it.
    status, text = returned(client, web_agent(client, KEY).id, "web_search", query="  ")
    assert json.loads(text) == {"error": "Query cannot be empty", "query": "  "}
    assert len(exa.seen("/search")) == 1


async def test_a_page_is_read_as_markdown_of_its_main_content(
    system: System, model: FakeOpenAI, site: Site
) -> None:
    client = system.client()
    agent = web_agent(client)
    status, text = returned(client, agent.id, "fetch_webpage", url=f"{site.url}/moved")
    assert status == "success", text
    assert text.startswith("# Sea otters hold hands"), text
    assert "a raft can hold more than a hundred of them" in text
    assert "[more about kelp](https://pages.example/kelp)" in text
    assert "Shop the otter store" not in text and "Cookie settings" not in text
    status, text = returned(client, agent.id, "fetch_webpage", url=f"{site.url}/notes.txt")
    assert (status, text) == ("success", "plain notes: otters eat sea urchins\nline two\n")
    status, text = returned(client, agent.id, "fetch_webpage", url=f"{site.url}/paper.pdf")
    assert (status, text) == ("success", "On the sleep of otters\n\nThey hold hands."), text


async def test_a_page_is_not_fetched_from_inside_the_network(
    system: System, model: FakeOpenAI, site: Site
) -> None:
    """The model's URL, and every redirect, is judged before anything is sent."""
    client = system.client()
    agent = web_agent(client)
    status, text = returned(client, agent.id, "fetch_webpage", url=f"{site.url}/to-internal")
    assert status == "error" and "127.0.0.2 is loopback, not a public address" in text, text
    status, text = returned(client, agent.id, "fetch_webpage", url=f"{site.internal_url}/secret")
    assert status == "error" and "not a public address" in text, text
    metadata = "http://169.254.169.254/latest/meta-data/"
    status, text = returned(client, agent.id, "fetch_webpage", url=metadata)
    assert status == "error" and "169.254.169.254 is a cloud metadata address" in text, text
    assert site.internal_hits == []
    status, text = returned(client, agent.id, "fetch_webpage", url="file:///etc/passwd")
    assert status == "error" and text.startswith("Invalid URL scheme 'file'"), text
    status, text = returned(client, agent.id, "fetch_webpage", url=f"{site.url}/logo.png")
    not_text = "the address answered with image/png, not a web page or text"
    assert (status, text) == ("error", not_text)


async def test_with_a_key_a_page_exa_has_is_read_through_exa(
    system: System, model: FakeOpenAI, exa: FakeExa, site: Site
) -> None:
    exa.keys.add(KEY)
    known = "https://pages.example/otters"
    exa.known[known] = ("Otters", "Otters are weasels of the sea.")
    client = system.client()
    agent = web_agent(client, KEY)
    status, text = returned(client, agent.id, "fetch_webpage", url=known)
    assert status == "success", text
    assert json.loads(text) == {
        "title": "Otters",
        "published_date": "2026-10-31T00:00:00.000Z",
        "author": "Known Author",
        "text": "Otters are weasels of the sea.",
    }
    # A page Exa does not have is fetched by O itself.
    status, text = returned(client, agent.id, "fetch_webpage", url=f"{site.url}/article")
    assert status == "success" and text.startswith("# Sea otters hold hands"), text
    asked = [r.body["urls"] for r in exa.seen("/contents")]
    assert asked == [[known], [f"{site.url}/article"]]
    assert all(r.headers["x-api-key"] == KEY for r in exa.seen("/contents"))

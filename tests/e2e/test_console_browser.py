"""The console in a real browser (headless Chromium, Debian's package, over WebDriver:
tests/webdriver.py), with the scripted LLM. The walkthrough runs against a system started as
`make run` starts it (`python -m o_devtools.supervisor`, embedded NATS and Postgres in a data
folder of its own, one process per service: chaos/system.py), the other tests against the
e2e tests' system: the
API key asked for once, an agent created, a message sent and its run followed live on its
timeline, a block edited and an older version restored; every form refusing bad input
before calling the API and showing the API's `detail` when the API refuses. Screenshots go
to docs/console/, which docs/console.md shows.

And CORS as a browser enforces it: a page served from another origin calls the gateway with
fetch() and an Authorization header (so the browser sends a preflight first) and reads the
answer; the same page from an origin not allowed cannot.
"""

from __future__ import annotations

import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from bench import demo_evolution
from chaos.system import System as MakeRun
from o_devtools.rebuild import PROJECTIONS
from o_setup.topology import durables
from tests.e2e.conftest import OTHER_ORIGIN_PORT, ROOT, SERVICES, System
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.webdriver import Browser, browser_or_skip, chromium

SHOTS = ROOT / "docs" / "console"
KEY = "test-key"
SHOT_NAMES = (
    "key",
    "agents",
    "run-live",
    "run",
    "block-history",
    "agent",
    "health",
    "evolution",
)

# The other origin's page: calls the gateway named in its query string, as a browser app
# (the Letta ADE) does, and writes what it got into the page.
OTHER_PAGE = b"""<!doctype html><html><body><p id="result">waiting</p><script>
const api = new URLSearchParams(location.search).get("api");
fetch(api + "/v1/agents/?limit=1", {headers: {Authorization: "Bearer test-key", "X-Project": "p"}})
  .then(async (r) => { document.getElementById("result").textContent =
      "status " + r.status + " " + (Array.isArray(await r.json()) ? "list" : "other"); })
  .catch((e) => { document.getElementById("result").textContent = "refused " + e.name; });
</script></body></html>"""


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(OTHER_PAGE)))
        self.end_headers()
        self.wfile.write(OTHER_PAGE)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def other_origin() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", OTHER_ORIGIN_PORT), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield OTHER_ORIGIN_PORT
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def browser() -> Iterator[Browser]:
    # (Asked for before the system: without Chromium the test skips before starting it.)
    browser_or_skip()
    with chromium() as b:
        yield b


@dataclass
class MadeRun:
    """A system as `make run` starts it, and the scripted LLM it talks to."""

    base_url: str
    http: httpx.AsyncClient
    llm: FakeOpenAI


@pytest.fixture
async def made_run(browser: Browser) -> AsyncIterator[MadeRun]:
    # (After the browser: without Chromium the test skips before starting anything.)
    # Not under pytest's tmp_path (another pytest session may make it private to Postgres).
    with tempfile.TemporaryDirectory(prefix="o-make-run-") as base, FakeOpenAI() as llm:
        system = MakeRun(Path(base), llm.base_url, env={"O_API_KEY": KEY})
        try:
            await system.start()
            async with httpx.AsyncClient(
                base_url=system.base_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60
            ) as http:
                yield MadeRun(system.base_url, http, llm)
        finally:
            await system.stop()


def shot(browser: Browser, name: str) -> None:
    browser.screenshot(SHOTS / f"{name}.png")


def message_of(browser: Browser, form: str) -> str:
    return browser.wait_for(
        lambda: browser.script(
            "const m = document.querySelector(arguments[0] + ' > .message.error');"
            " return m && m.textContent;",
            form,
        ),
        f"an error under {form}",
    )


def submit(browser: Browser, form: str) -> None:
    browser.find(f"{form} button[type=submit]").click()


def signed_in(browser: Browser, base_url: str) -> None:
    """The console opened and the API key given (kept in the tab for what it opens next)."""
    browser.open(f"{base_url}/console")
    browser.find("#key-form input").type(KEY)
    submit(browser, "#key-form")
    browser.find("#agents")


def set_value(browser: Browser, css: str, value: str) -> None:
    """A field's whole value at once (typing thousands of characters key by key is slow)."""
    browser.script(
        "const e = document.querySelector(arguments[0]); e.value = arguments[1];"
        " e.dispatchEvent(new Event('input'));",
        css,
        value,
    )


async def test_a_page_on_another_origin_calls_the_api_with_fetch(
    browser: Browser, system: System, other_origin: int
) -> None:
    browser.open(f"http://127.0.0.1:{other_origin}/?api={system.base_url}")
    assert browser.wait_text("#result", "status") == "status 200 list"
    # The same page from an origin the gateway does not name: the browser withholds the answer.
    browser.open(f"http://localhost:{other_origin}/?api={system.base_url}")
    assert browser.wait_text("#result", "refused") == "refused TypeError"


async def test_the_console_walkthrough(browser: Browser, made_run: MadeRun) -> None:
    system, llm = made_run, made_run.llm
    console = f"{system.base_url}/console"
    browser.open(console)
    # The key is asked for once; an empty one is refused before anything is sent.
    browser.find("#key-form")
    submit(browser, "#key-form")
    assert message_of(browser, "#key-form") == "Enter the gateway's API key (O_API_KEY)."
    shot(browser, "key")
    browser.find("#key-form input").type(KEY)
    submit(browser, "#key-form")

    # A new agent: bad input is refused in the page; what the API refuses shows its detail.
    browser.find("#create-agent")
    submit(browser, "#create-agent")
    assert message_of(browser, "#create-agent") == "Give the agent a name."
    browser.find("#create-agent input[name=name]").type("Console Sam")
    model = browser.find("#create-agent input[name=model]")
    model.clear()
    model.type("gpt-4o-mini")
    submit(browser, "#create-agent")
    assert message_of(browser, "#create-agent").startswith("A model is a handle")
    model.clear()
    model.type("nowhere/gpt-4o-mini")
    submit(browser, "#create-agent")
    refused = await system.http.post(
        "/v1/agents/", json={"name": "Console Sam", "model": "nowhere/gpt-4o-mini"}
    )
    assert refused.status_code == 400
    detail = refused.json()["detail"]
    assert browser.wait_text("#create-agent > .message", detail) == detail
    model.clear()
    model.type("openai/gpt-4o-mini")
    browser.find("#create-agent input[name=tags]").type("console, demo")
    browser.find("#create-agent textarea[name=human]").type("Name: Sam")
    submit(browser, "#create-agent")
    browser.wait_text("h1", "Console Sam")
    agent_id = str(browser.script("return location.hash")).removeprefix("#/agents/")
    agent = (await system.http.get(f"/v1/agents/{agent_id}")).json()
    assert (agent["name"], sorted(agent["tags"])) == ("Console Sam", ["console", "demo"])

    # The agents list finds it by name and by tag.
    browser.open(f"{console}#/agents?q=Sam&tags=demo")
    assert "Console Sam" in browser.wait_text("#agents", "Console Sam")
    shot(browser, "agents")

    # A message: the run is followed live on its timeline while the model is held.
    browser.open(f"{console}#/agents/{agent_id}")
    submit(browser, "#send-message")
    assert message_of(browser, "#send-message") == "Write a message first."
    held = threading.Event()
    llm.push(
        Reply(
            tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})],
            prompt_tokens=120,
            completion_tokens=12,
        ),
        Reply(content="Noted: you like tea.", release=held, prompt_tokens=140, completion_tokens=6),
    )
    browser.find("#send-message textarea").type("I like tea")
    submit(browser, "#send-message")
    try:
        browser.wait_text("#timeline", "tool memory_insert")
        assert "live" in browser.wait_text("#run-summary", "running")

        # The second LLM call (held) is drawn open once the tool has returned (the page
        # polls: the tool may still show in progress first).
        def drawn_open() -> str | None:
            text = browser.script(
                "const s = document.querySelector('svg.waterfall'); return s && s.textContent"
            )
            return text if isinstance(text, str) and "LLM call in progress" in text else None

        drawn = browser.wait_for(drawn_open, "the held LLM call drawn open")
        assert "tool memory_insert: in progress" not in drawn
        shot(browser, "run-live")
    finally:
        held.set()
    summary = browser.wait_text("#run-summary", "completed")
    assert "stop reason: end_turn" in summary and "tokens: 278" in summary
    timeline = browser.find("#timeline").text
    assert "step 1 LLM openai/gpt-4o-mini" in timeline
    assert "Noted: you like tea." in timeline
    shot(browser, "run")

    # The human block: the tool's edit is v2; an edit over the limit is refused in the page.
    browser.open(f"{console}#/agents/{agent_id}")
    human = 'form.block[data-label="human"]'
    value = browser.find(f"{human} textarea")
    assert value.value() == "Name: Sam\nLikes: tea"
    block = (await system.http.get(f"/v1/agents/{agent_id}/core-memory/blocks/human")).json()
    set_value(browser, f"{human} textarea", "x" * (block["limit"] + 1))
    submit(browser, human)
    assert message_of(browser, human) == (
        f"The value is {block['limit'] + 1} characters; this block holds at most {block['limit']}."
    )
    set_value(browser, f"{human} textarea", "Name: Sam\nLikes: coffee")
    submit(browser, human)
    browser.wait_text(f"{human} h3", "v3")
    saved = (await system.http.get(f"/v1/agents/{agent_id}/core-memory/blocks/human")).json()
    assert (saved["value"], saved["version"]) == ("Name: Sam\nLikes: coffee", 3)

    # Its history as diffs, and the first version restored.
    browser.find(f"{human} button.quiet").click()
    browser.wait_text(f'{human} details[data-version="3"]', "+ Likes: coffee")
    assert "- Likes: tea" in browser.find(f'{human} details[data-version="3"] pre').text
    shot(browser, "block-history")
    browser.find(f'{human} details[data-version="1"] summary').click()
    browser.find(f'{human} details[data-version="1"] button.restore').click()
    browser.wait_text(f"{human} h3", "v4")
    assert browser.find(f"{human} textarea").value() == "Name: Sam"
    versions = (await system.http.get(f"/v1/blocks/{block['id']}/versions")).json()
    assert [(v["version"], v["value"], v["restored_from"]) for v in versions][-1] == (
        4,
        "Name: Sam",
        1,
    )

    # Archival memory: an empty search is refused in the page; a passage inserted is listed.
    submit(browser, "#archival-search")
    assert message_of(browser, "#archival-search") == "Write what to search for."
    browser.find("#archival-insert input[name=text]").type("Sam's cat is called Miso")
    submit(browser, "#archival-insert")
    browser.wait_text("#passages", "Sam's cat is called Miso")
    shot(browser, "agent")

    # Runs and health.
    browser.open(f"{console}#/runs?agent={agent_id}")
    browser.wait_text("table.runs", "completed")
    browser.open(f"{console}#/health")
    browser.wait_text("#sandbox", "available")
    # Every service process from the roll call, every durable consumer, every projection
    # (GET /v1/operations/status, what `python -m o_ops status` prints).
    browser.wait_text("#services", "evolution")
    services = browser.script(
        "return [...document.querySelectorAll('#services tbody tr')]"
        ".map(r => [...r.cells].slice(0, 3).map(c => c.innerText))"
    )
    # (`make run` starts one process of each service.)
    assert sorted((s, ready) for s, _, ready in services) == sorted((s, "ready") for s in SERVICES)
    consumers = browser.script(
        "return [...document.querySelectorAll('#consumers tbody tr')]"
        ".map(r => r.cells[1].innerText)"
    )
    assert sorted(consumers) == sorted(d.name for d in durables())
    projections = browser.script(
        "return [...document.querySelectorAll('#projections tbody tr')]"
        ".map(r => r.cells[0].innerText)"
    )
    assert projections == list(PROJECTIONS)
    assert browser.find("#verdict").text == "ok"
    browser.find("#dead-letters")
    shot(browser, "health")
    assert set(SHOT_NAMES) - {"evolution"} <= {p.stem for p in SHOTS.glob("*.png")}


async def test_the_evolution_page_shows_an_experiment_and_its_buttons_call_the_api(
    browser: Browser, system: System, llm: FakeOpenAI
) -> None:
    """A proposal evaluated in the shadow with the demo's scripted model and judge
    (bench/demo_evolution.py): its pair table, SPRT trace and slice table; start a canary
    before approval (the API's refusal shown), approve (the canary starts by itself), abort."""
    llm.default_reply = demo_evolution.scripted
    created = await system.http.post(
        "/v1/agents/",
        json={
            "name": "Evolving Sam",
            "model": "openai/gpt-4o-mini",
            "memory_blocks": [{"label": "human", "value": "Name: Sam"}],
        },
    )
    agent_id = created.json()["id"]
    base = f"/v1/agents/{agent_id}/evolution"
    for question in demo_evolution.QUESTIONS[:9]:
        said = await system.http.post(
            f"/v1/agents/{agent_id}/messages",
            json={"messages": [{"role": "user", "content": question}]},
        )
        assert said.status_code == 200, said.text
    config = {
        "enabled": True,
        "mode": "canary",
        "canary_steps": [25, 50, 100],
        "cases_per_evaluation": 9,
        "max_votes_per_conversation": 9,
    }
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    patch = {
        "ops": [{"op": "append_text", "target": "system", "text": demo_evolution.RULE}],
        "rationale": "users like to be greeted by name",
    }
    made = await system.http.post(f"{base}/proposals", json={"patch": patch})
    assert made.status_code == 201, made.text
    pid = made.json()["id"]

    signed_in(browser, system.base_url)
    browser.open(f"{system.base_url}/console#/agents/{agent_id}/evolution?proposal={pid}")
    # The evaluation runs by itself; the page shows it once decided (it follows changes).
    browser.wait_text("#proposal h3", "accepted", timeout=90)
    assert "9 wins" in browser.find("#proposal").text
    assert len(browser.find_all("#cases tbody tr")) == 9
    assert "conversation:default" in browser.find("#slices").text
    assert browser.find("#proposal svg.chart path.series")
    assert demo_evolution.RULE in browser.find("#proposal-diff").text

    # A canary before approval: the API refuses, and the page shows why.
    browser.find("#review button:nth-of-type(4)").click()
    refused = message_of(browser, "#review")
    again = await system.http.post(f"{base}/proposals/{pid}/rollout")
    assert again.status_code == 409 and refused == again.json()["detail"]
    browser.find("#review input[name=note]").type("looks right")
    browser.find("#review button:nth-of-type(1)").click()
    browser.wait_for(
        lambda: "accepted" not in browser.find("#proposal h3").text, "the approval shown"
    )
    approved = (await system.http.get(f"{base}/proposals/{pid}")).json()
    assert approved["status"] in ("approved", "canary")
    # In mode canary the canary starts by itself, soon after.
    browser.wait_text("#canaries", "running", timeout=90)
    shot(browser, "evolution")
    browser.find("#canaries button").click()
    browser.wait_text("#canaries", "aborted")
    rollouts = (await system.http.get(f"{base}/rollouts")).json()
    assert [r["status"] for r in rollouts] == ["aborted"]
    # The rollback form wants a version before it calls anything.
    submit(browser, "#rollback")
    assert message_of(browser, "#rollback") == "Choose the version to serve again."


async def test_the_evolution_page_follows_changes_unless_a_form_is_being_filled_in(
    browser: Browser, system: System
) -> None:
    """Left open, the evolution page shows a proposal made meanwhile (by the API, as the agent
    or another operator would) without a reload; while a field on it is being filled in it
    keeps what it shows (asking all the same), and catches up once the field is left empty."""
    created = await system.http.post(
        "/v1/agents/", json={"name": "Watched", "model": "openai/gpt-4o-mini"}
    )
    agent_id = created.json()["id"]
    base = f"/v1/agents/{agent_id}/evolution"
    config = {"enabled": True, "mode": "propose_only"}
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200

    async def proposed(text: str) -> str:
        patch = {"ops": [{"op": "append_text", "target": "system", "text": text}]}
        made = await system.http.post(f"{base}/proposals", json={"patch": patch})
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def shown() -> str:
        return str(browser.find("#proposals").text)

    signed_in(browser, system.base_url)
    browser.open(f"{system.base_url}/console#/agents/{agent_id}/evolution")
    browser.wait_text("#proposals", "none")
    first = await proposed("Be brief.")
    browser.wait_text("#proposals", first[:17])

    browser.open(f"{system.base_url}/console#/agents/{agent_id}/evolution?proposal={first}")
    browser.find("#review input[name=note]").type("half a thought")
    browser.script("document.activeElement.blur()")
    asked = (
        "return performance.getEntriesByType('resource')"
        ".filter(e => e.name.endsWith('/proposals')).length"
    )
    before = int(browser.script(asked))
    second = await proposed("Be kind.")
    # Two more reads of the proposals since: the page asked, and kept the half-typed note.
    browser.wait_for(lambda: int(browser.script(asked)) >= before + 2 or None, "two more reads")
    assert second[:17] not in shown()
    assert browser.find("#review input[name=note]").value() == "half a thought"
    set_value(browser, "#review input[name=note]", "")
    browser.wait_text("#proposals", second[:17])


async def test_the_agents_and_runs_lists_go_a_page_at_a_time(
    browser: Browser, system: System
) -> None:
    """More agents or runs than a page holds: a link to the next page (the API's `after`
    cursor in the hash), none on the last, a link back to the first; `limit` in the hash
    sets the page's size (100 when not given)."""
    tag = f"paged-{uuid.uuid4().hex[:8]}"
    made = [
        (
            await system.http.post(
                "/v1/agents/",
                json={"name": f"Paged {n}", "model": "openai/gpt-4o-mini", "tags": [tag]},
            )
        ).json()["id"]
        for n in range(3)
    ]
    for n in range(3):
        said = await system.http.post(
            f"/v1/agents/{made[0]}/messages",
            json={"messages": [{"role": "user", "content": f"hello {n}"}]},
        )
        assert said.status_code == 200, said.text

    def ids(css: str) -> list[str]:
        rows = browser.script(
            "return [...document.querySelectorAll(arguments[0] + ' tbody tr a')]"
            ".map(a => decodeURIComponent(a.getAttribute('href').split('/')[2]))",
            css,
        )
        return [str(r) for r in rows]

    def pager_links() -> list[str]:
        found = browser.script(
            "return [...document.querySelectorAll('.pager a')].map(a => a.className)"
        )
        return [str(c) for c in found]

    signed_in(browser, system.base_url)
    # Newest first, two a page: the last two made, then the first one, then back.
    browser.open(f"{system.base_url}/console#/agents?tags={tag}&limit=2")
    browser.wait_for(lambda: ids("#agents") == made[:0:-1] or None, "the first page of agents")
    assert pager_links() == ["next-page"]
    browser.find(".pager .next-page").click()
    browser.wait_for(lambda: ids("#agents") == made[:1] or None, "the second page of agents")
    assert pager_links() == ["first-page"]
    browser.find(".pager .first-page").click()
    browser.wait_for(lambda: ids("#agents") == made[:0:-1] or None, "the first page again")
    # Without `limit`, a page of 100 holds them all, and no next page is offered.
    browser.open(f"{system.base_url}/console#/agents?tags={tag}")
    browser.wait_for(lambda: len(ids("#agents")) == 3 or None, "all three on one page")
    assert pager_links() == []

    runs = [
        r["id"] for r in (await system.http.get("/v1/runs/", params={"agent_id": made[0]})).json()
    ]
    assert len(runs) == 3
    browser.open(f"{system.base_url}/console#/runs?agent={made[0]}&limit=2")
    browser.wait_for(lambda: ids("table.runs")[::2] == runs[:2] or None, "the first page of runs")
    browser.find(".pager .next-page").click()
    browser.wait_for(lambda: ids("table.runs")[::2] == runs[2:] or None, "the last page of runs")
    assert pager_links() == ["first-page"]


async def test_the_runs_list_follows_runs_as_they_start_and_end(
    browser: Browser, system: System, llm: FakeOpenAI
) -> None:
    """The runs list, left open, shows a run started meanwhile and its status as it goes,
    without a reload: it asks again every second while it is the first page."""
    created = await system.http.post(
        "/v1/agents/", json={"name": "Followed", "model": "openai/gpt-4o-mini"}
    )
    agent_id = created.json()["id"]
    signed_in(browser, system.base_url)
    browser.open(f"{system.base_url}/console#/runs?agent={agent_id}")
    browser.wait_text("table.runs", "none")
    held = threading.Event()
    llm.push(Reply(content="In a moment.", release=held))
    sent = await system.http.post(
        f"/v1/agents/{agent_id}/messages/async",
        json={"messages": [{"role": "user", "content": "take your time"}]},
    )
    assert sent.status_code == 200, sent.text
    run_id = sent.json()["id"]
    try:
        row = browser.wait_text("table.runs", "running")
        assert run_id[:12] in row
    finally:
        held.set()
    assert "end_turn" in browser.wait_text("table.runs", "completed")
    # (Marked live: the first page follows; a later page only while a run on it is in flight.)
    assert browser.script("return document.querySelector('#runs-live').hidden") is False


def test_the_docs_show_every_screenshot_the_walkthrough_takes() -> None:
    page = (ROOT / "docs" / "console.md").read_text()
    for name in SHOT_NAMES:
        assert f"](console/{name}.png)" in page
        assert (SHOTS / f"{name}.png").is_file()

"""One web tool call: its arguments checked, the Exa key found, Exa or O's own fetch, and
what the model is given back (ToolOutcome: an error for what the model can act on).

The Exa key is the agent's own tool secret `EXA_API_KEY` if it has one (decrypted here,
with the executor's O_SECRETS_KEY), else the server's; as in Letta. fetch_webpage uses Exa
when there is a key and Exa has the page, and fetches the page itself otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from o_executor.run.deps import ToolOutcome
from o_executor.web import answers, exa
from o_executor.web.fetch import FetchFailed, fetch
from o_executor.web.pages import NotAPage, page_text
from o_executor.web.requests import BadArguments, fetch_request, search_request
from o_executor.web.settings import EXA_KEY_ENV, WebSettings
from o_runtime import tool_secrets
from o_runtime.tool_secrets import SecretsUnavailable


async def run_web_tool(
    name: str,
    args: dict[str, Any],
    settings: WebSettings,
    encrypted_secrets: Mapping[str, str],
    timeout: float,
) -> ToolOutcome:
    """Run `web_search` or `fetch_webpage` within `timeout` seconds."""
    try:
        async with asyncio.timeout(timeout):
            if name == "web_search":
                answer = await _search(args, settings, encrypted_secrets, timeout)
            else:
                answer = await _fetch_page(args, settings, encrypted_secrets, timeout)
    except TimeoutError:
        return ToolOutcome(False, f"{name} got no answer within {timeout:g} s")
    except (BadArguments, FetchFailed, NotAPage, SecretsUnavailable) as exc:
        return ToolOutcome(False, str(exc))
    return ToolOutcome(True, answers.clipped(answer, settings.max_answer_chars))


async def _search(
    args: dict[str, Any], settings: WebSettings, secrets: Mapping[str, str], timeout: float
) -> str:
    request = search_request(args)
    if not request.query.strip():
        return answers.empty_query(request.query)
    key = exa_key(settings, secrets)
    if key is None:
        raise BadArguments(
            f"{EXA_KEY_ENV} is not set: web_search needs an Exa API key, in the agent's tool"
            " secrets or on the server"
        )
    try:
        found = await exa.search(request, key, settings.exa_base_url, timeout)
    except exa.ExaFailed as exc:
        return answers.search_failed(request.query, str(exc))
    return answers.search_results(request.query, found, request.include_text)


async def _fetch_page(
    args: dict[str, Any], settings: WebSettings, secrets: Mapping[str, str], timeout: float
) -> str:
    request = fetch_request(args)
    key = exa_key(settings, secrets)
    if key is not None:
        try:
            found = await exa.contents(request.url, key, settings.exa_base_url, timeout)
        except exa.ExaFailed:
            found = None  # (O fetches the page itself, as Letta falls back to its own fetch)
        if found is not None and found.text:
            return answers.page_contents(found)
    page = await fetch(
        request.url, settings.targets, settings.max_page_bytes, settings.max_redirects
    )
    # (lxml parses in a thread: a large page does not hold up the executor's other runs.)
    text = await asyncio.to_thread(page_text, page.body, page.content_type)
    if page.cut:
        limit = settings.max_page_bytes
        text += f"\n\n[the page is longer than {limit} bytes: only its start was read]"
    return text


def exa_key(settings: WebSettings, secrets: Mapping[str, str]) -> str | None:
    """The agent's own Exa key (its tool secret), else the server's."""
    if EXA_KEY_ENV in secrets:
        own = tool_secrets.decrypt_all({EXA_KEY_ENV: secrets[EXA_KEY_ENV]})[EXA_KEY_ENV]
        if own:
            return own
    return settings.exa_api_key

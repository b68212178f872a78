"""Which MCP server URLs the gateway accepts: http(s) to public hosts, and internal ones
only where the operator allows them (O_MCP_ALLOW_PRIVATE_URLS)."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from o_gateway.mcp_registry import check_url


@pytest.mark.parametrize(
    "url",
    ["https://api.example.com/sse", "http://mcp.exa.ai/mcp?key=1", "https://8.8.8.8:8443/mcp"],
)
def test_public_urls_are_accepted(url: str) -> None:
    check_url(url, allow_private=False)


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:8000/mcp",
        "http://127.0.0.1/mcp",
        "http://10.1.2.3/mcp",
        "http://169.254.169.254/latest",
        "http://[::1]/mcp",
        "http://metadata.google.internal/",
        "http://printer.local/mcp",
        "http://api.default.svc/mcp",
    ],
)
def test_internal_urls_are_refused_unless_allowed(url: str) -> None:
    with pytest.raises(HTTPException) as refused:
        check_url(url, allow_private=False)
    assert refused.value.status_code == 422
    check_url(url, allow_private=True)


@pytest.mark.parametrize("url", ["ftp://example.com/x", "example.com/mcp", "http:///mcp", ""])
def test_what_is_not_an_http_url_is_refused_always(url: str) -> None:
    with pytest.raises(HTTPException):
        check_url(url, allow_private=True)

"""The console (docs/console.md): a small static bundle served at `/console`.

The bundle (o_gateway/console/: one HTML page, ES modules, one stylesheet; no build step,
nothing fetched from elsewhere) holds no data: the page asks for the API key, keeps it in
the tab's sessionStorage and reads everything from the JSON API with it, so the console
sees exactly what the key may see. The files are therefore served without the key
(app.py: Authenticated), like a login page.

Files are read once, at first use, and served from memory with a strong ETag and
`Cache-Control: no-cache`: a browser revalidates each time (a 304 without a body), so an
upgraded gateway never leaves a stale module beside a new one. A Content-Security-Policy
allows only the gateway's own scripts, styles and API (no inline script, no CDN).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request, Response

router = APIRouter(include_in_schema=False)

CONSOLE_PATH = "/console"
BUNDLE = Path(__file__).resolve().parents[1] / "console"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_bundle(folder: Path) -> dict[str, Asset]:
    """The bundle's files by name (flat: no sub-folders, so no path ever reaches the disk)."""
    assets: dict[str, Asset] = {}
    for path in sorted(folder.iterdir()):
        content_type = CONTENT_TYPES.get(path.suffix)
        if content_type is None or not path.is_file():
            continue
        body = path.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        assets[path.name] = Asset(body, content_type, etag)
    return assets


@cache
def bundle() -> dict[str, Asset]:
    return load_bundle(BUNDLE)


def _serve(request: Request, name: str) -> Response:
    asset = bundle().get(name)
    if asset is None:
        raise HTTPException(404, f"no console file {name!r}")
    headers = SECURITY_HEADERS | {"ETag": asset.etag}
    if asset.etag in (t.strip() for t in request.headers.get("if-none-match", "").split(",")):
        return Response(status_code=304, headers=headers)
    body = b"" if request.method == "HEAD" else asset.body
    response = Response(body, media_type=asset.content_type, headers=headers)
    if request.method == "HEAD":
        response.headers["content-length"] = str(len(asset.body))
    return response


@router.api_route(CONSOLE_PATH, methods=["GET", "HEAD"])
@router.api_route(CONSOLE_PATH + "/", methods=["GET", "HEAD"])
async def index(request: Request) -> Response:
    return _serve(request, "index.html")


@router.api_route(CONSOLE_PATH + "/{name}", methods=["GET", "HEAD"])
async def asset(request: Request, name: str) -> Response:
    return _serve(request, name)

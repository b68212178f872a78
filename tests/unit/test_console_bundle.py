"""The console's bundle (o_gateway/console/) is whole and self-contained: every module it
imports is in it, nothing is fetched from another host, no inline script (the CSP forbids
it); and O_CONSOLE turns it off."""

from __future__ import annotations

import re

import pytest

from o_gateway.routes.console import BUNDLE, CONTENT_TYPES, load_bundle
from o_gateway.settings import GatewaySettings
from o_runtime.env import BadSetting, Env

IMPORT = re.compile(r"""(?:import|from)\s*["'](?P<path>[^"']+)["']""")


def test_every_imported_module_is_in_the_bundle() -> None:
    assets = load_bundle(BUNDLE)
    modules = [name for name in assets if name.endswith(".js")]
    assert "app.js" in modules and "index.html" in assets and "console.css" in assets
    for name in modules:
        for match in IMPORT.finditer(assets[name].body.decode()):
            path = match["path"]
            assert path.startswith("./"), f"{name} imports {path} from outside the bundle"
            assert path[2:] in assets, f"{name} imports {path}, which is not in the bundle"


def test_nothing_is_loaded_from_another_host_and_no_script_is_inline() -> None:
    assets = load_bundle(BUNDLE)
    html = assets["index.html"].body.decode()
    assert re.findall(r'(?:src|href)="([^"#]+)"', html) == [
        "data:,",  # (no favicon to fetch)
        "/console/console.css",
        "/console/app.js",
    ]
    assert "<script>" not in html and "onclick=" not in html
    for name, asset in assets.items():
        text = asset.body.decode()
        # (The SVG namespace is a name, not something fetched.)
        hosts = set(re.findall(r"https?://[^\s\"'`)]+", text)) - {"http://www.w3.org/2000/svg"}
        assert hosts == set(), f"{name} names {hosts}"
        assert ".innerHTML" not in text, f"{name} writes markup from strings"


def test_each_file_has_a_content_type_and_a_strong_etag() -> None:
    assets = load_bundle(BUNDLE)
    assert {name.rsplit(".", 1)[1] for name in assets} == {"html", "js", "css"}
    for name, asset in assets.items():
        assert asset.content_type == CONTENT_TYPES["." + name.rsplit(".", 1)[1]]
        assert re.fullmatch(r'"[0-9a-f]{32}"', asset.etag)


def test_the_console_is_on_unless_turned_off() -> None:
    assert GatewaySettings.from_env(Env({})).console is True
    assert GatewaySettings.from_env(Env({"O_CONSOLE": "0"})).console is False
    assert GatewaySettings.from_env(Env({"O_CONSOLE": "1"})).console is True
    with pytest.raises(BadSetting, match="O_CONSOLE must be 1 or 0"):
        GatewaySettings.from_env(Env({"O_CONSOLE": "maybe"}))

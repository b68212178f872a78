"""Headless Chromium for tests, driven over the W3C WebDriver protocol.

WebDriver is plain HTTP and JSON (https://www.w3.org/TR/webdriver2/), so the few commands
the browser tests need (open a page, find, click, type, read text, run a script, take a
screenshot) are a thin layer over httpx, which the tests already use; nothing else is
installed into the project. The browser and its driver are Debian's packages `chromium`
and `chromium-driver`; where they are missing (the project's CI has only Python) the
tests that need them skip, saying so (`browser_or_skip`).
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from o_devtools.ports import free_port

T = TypeVar("T")
# The W3C key for a web element's reference in JSON.
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


class WebDriverError(RuntimeError):
    pass


class Element:
    def __init__(self, browser: Browser, ref: str) -> None:
        self.browser = browser
        self.ref = ref

    def _path(self, tail: str = "") -> str:
        return f"/element/{self.ref}{tail}"

    def click(self) -> None:
        self.browser.command("POST", self._path("/click"), {})

    def clear(self) -> None:
        self.browser.command("POST", self._path("/clear"), {})

    def type(self, text: str) -> None:
        self.browser.command("POST", self._path("/value"), {"text": text})

    @property
    def text(self) -> str:
        return str(self.browser.command("GET", self._path("/text")))

    def value(self) -> str:
        return str(self.browser.command("GET", self._path("/property/value")) or "")

    def find(self, css: str) -> Element:
        found = self.browser.command(
            "POST", self._path("/element"), {"using": "css selector", "value": css}
        )
        return Element(self.browser, found[ELEMENT])


class Browser:
    """One WebDriver session of headless Chromium."""

    def __init__(self, driver_url: str, session_id: str, http: httpx.Client) -> None:
        self.base = f"{driver_url}/session/{session_id}"
        self.http = http

    def command(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        answer = self.http.request(method, self.base + path, json=body)
        value = answer.json().get("value")
        if answer.status_code >= 400:
            message = value.get("message", "") if isinstance(value, dict) else value
            raise WebDriverError(f"{method} {path}: {answer.status_code} {message}")
        return value

    def open(self, url: str) -> None:
        self.command("POST", "/url", {"url": url})

    def find(self, css: str) -> Element:
        """The first element matching `css`, waited for up to the implicit wait."""
        found = self.command("POST", "/element", {"using": "css selector", "value": css})
        if not isinstance(found, dict) or ELEMENT not in found:
            raise WebDriverError(f"no {css}: {found!r}; the page's console: {self.log()}")
        return Element(self, found[ELEMENT])

    def log(self) -> list[str]:
        """What the page wrote to its console (errors included), as chromedriver keeps it."""
        entries = self.command("POST", "/se/log", {"type": "browser"})
        return [str(e.get("message")) for e in entries or []]

    def find_all(self, css: str) -> list[Element]:
        found = self.command("POST", "/elements", {"using": "css selector", "value": css})
        return [Element(self, f[ELEMENT]) for f in found]

    def script(self, source: str, *args: Any) -> Any:
        return self.command("POST", "/execute/sync", {"script": source, "args": list(args)})

    def wait_for(self, check: Callable[[], T | None], what: str, timeout: float = 20.0) -> T:
        """Poll `check` (a read of the page) until it gives something truthy."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = check()
            except WebDriverError as exc:
                last = exc
            if last and not isinstance(last, WebDriverError):
                return last
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout} s for {what}; last saw {last!r}")
            time.sleep(0.05)

    def wait_text(self, css: str, text: str, timeout: float = 20.0) -> str:
        """Wait until the element matching `css` holds `text`; its whole text."""

        def read() -> str | None:
            found = self.script(
                "const e = document.querySelector(arguments[0]); return e && e.innerText;", css
            )
            return found if isinstance(found, str) and text in found else None

        return self.wait_for(read, f"{text!r} in {css}", timeout)

    def screenshot(self, path: Path, width: int = 1280) -> None:
        """The whole page as a PNG (the window made as tall as the page first)."""
        height = int(self.script("return document.documentElement.scrollHeight"))
        self.command("POST", "/window/rect", {"width": width, "height": min(height + 100, 4000)})
        png = base64.b64decode(self.command("GET", "/screenshot"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)


def chromium_binary() -> str | None:
    for name in CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    return None


def browser_or_skip() -> tuple[str, str]:
    """The paths of chromedriver and Chromium, or the test is skipped saying why."""
    driver, binary = shutil.which("chromedriver"), chromium_binary()
    if driver is None or binary is None:
        pytest.skip(
            "headless Chromium is not installed: `apt-get install chromium chromium-driver`"
            " (Debian) runs the browser tests"
        )
    return driver, binary


@contextmanager
def chromium(implicit_wait: float = 10.0) -> Iterator[Browser]:
    """A headless Chromium session; its driver process is stopped (by its pid) after."""
    driver, _ = browser_or_skip()
    port = free_port()
    process = subprocess.Popen(
        [driver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    http = httpx.Client(timeout=60)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if http.get(f"{url}/status").json()["value"]["ready"]:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise WebDriverError("chromedriver did not start")
            time.sleep(0.05)
        options = {
            "args": [
                "--headless=new",
                "--no-sandbox",  # (root in a container: Chromium's sandbox cannot start)
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--window-size=1280,900",
            ]
        }
        created = http.post(
            f"{url}/session",
            json={
                "capabilities": {
                    "alwaysMatch": {
                        "browserName": "chrome",
                        "goog:chromeOptions": options,
                        "goog:loggingPrefs": {"browser": "ALL"},
                    }
                }
            },
        ).json()["value"]
        browser = Browser(url, created["sessionId"], http)
        browser.command("POST", "/timeouts", {"implicit": int(implicit_wait * 1000)})
        try:
            yield browser
        finally:
            http.delete(browser.base)
    finally:
        http.close()
        process.terminate()
        process.wait(timeout=10)

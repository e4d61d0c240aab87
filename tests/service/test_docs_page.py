"""The API's documentation pages in a real browser (headless Chromium driven by Playwright), served by
`warpmap serve` on loopback with no outside network.

The pages' scripts and styles must come from the service itself: with the stock pages, which load
Swagger UI and ReDoc from a CDN, a service that reaches no outside network (as beside GPU workers, or
here) showed a blank page. The browser may reach only the server; every request elsewhere is refused
and recorded, and the tests fail on any but an image (ReDoc's footer shows its maker's logo from their
CDN, which is simply not drawn offline). Then a key is entered through Swagger UI's Authorize dialog
and a request is sent from the page, as a person would try the API.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from tests.service.test_e2e_workers import _wait

playwright_api = pytest.importorskip("playwright.sync_api")

#: Debian's Chromium (``apt-get install chromium``; `.ci/run` installs it); Playwright's own browser
#: builds are downloads this machine cannot make.
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install chromium)")]

#: Chromium's own background connections (updates, sync, Google lookups) are turned off, so that every
#: request the page makes is one the tests account for.
CHROMIUM_ARGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture
def server(tmp_path: Path, warpmap_process: Callable[..., subprocess.Popen[bytes]]) -> tuple[str, str]:
    """(base URL, a read key) of `warpmap serve` on a fresh SQLite database, executors off."""
    url = f"sqlite:///{tmp_path / 'warpmap.db'}"
    subprocess.run([sys.executable, "-m", "service.cli", "db", "upgrade", "--database-url", url],
                   check=True, capture_output=True, timeout=120)
    created = subprocess.run([sys.executable, "-m", "service.cli", "keys", "create", "--scope", "read",
                              "--database-url", url], check=True, capture_output=True, text=True, timeout=60)
    port = free_port()
    warpmap_process("api", "serve", "--database-url", url, "--host", "127.0.0.1", "--port", str(port),
                    "--workers", "0")
    base = f"http://127.0.0.1:{port}"
    _wait("the API", lambda: _status(f"{base}/healthz") == 200, timeout_s=60)
    return base, created.stdout.split()[-1]


def _status(url: str) -> int | None:
    """The HTTP status of a GET of ``url``; None while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, chromium_sandbox=False)
        try:
            yield browser
        finally:
            browser.close()


def _page(browser: Any, base: str) -> tuple[Any, list[str]]:
    """A page that may reach ``base`` only: any other request is aborted, and listed unless an image."""
    page = browser.new_page()
    elsewhere: list[str] = []

    def route(route: Any) -> None:
        request = route.request
        if request.url.startswith(base + "/") or request.url.startswith("data:"):
            route.continue_()
        else:
            if request.resource_type != "image":
                elsewhere.append(f"{request.resource_type} {request.url}")
            route.abort()

    page.route("**/*", route)
    return page, elsewhere


def _operations(base: str) -> set[tuple[str, str]]:
    with urllib.request.urlopen(f"{base}/openapi.json", timeout=10) as response:
        schema = json.load(response)
    return {(method.upper(), path) for path, methods in schema["paths"].items() for method in methods}


def test_swagger_ui_shows_every_operation_with_nothing_from_elsewhere(server: tuple[str, str], browser: Any) -> None:
    base, _ = server
    page, elsewhere = _page(browser, base)
    page.goto(f"{base}/docs")
    page.locator(".opblock").first.wait_for(timeout=30_000)
    shown = {(block.locator(".opblock-summary-method").inner_text().strip(),
              block.locator(".opblock-summary-path").get_attribute("data-path"))
             for block in page.locator(".opblock").all()}
    assert shown == _operations(base)
    assert page.title() == "warpmap - Swagger UI"
    assert elsewhere == []


def test_redoc_shows_the_api_with_nothing_from_elsewhere(server: tuple[str, str], browser: Any) -> None:
    base, _ = server
    page, elsewhere = _page(browser, base)
    page.goto(f"{base}/redoc")
    page.get_by_text("/v1/tunings/{job_id}/trials").first.wait_for(timeout=30_000)
    assert "Give an operator spec and a target" in page.content()
    assert elsewhere == []


def test_a_request_tried_from_the_page_with_a_key(server: tuple[str, str], browser: Any) -> None:
    base, key = server
    page, elsewhere = _page(browser, base)
    page.goto(f"{base}/docs")
    page.get_by_role("button", name="Authorize").first.click()
    page.get_by_label("auth-bearer-value").fill(key)
    page.get_by_role("button", name="Apply credentials").click()
    page.locator(".modal-ux").get_by_role("button", name="Close").click()
    devices = page.locator(".opblock", has=page.locator('.opblock-summary-path[data-path="/v1/devices"]'))
    devices.locator(".opblock-summary").click()
    devices.get_by_role("button", name="Try it out").click()
    devices.get_by_role("button", name="Execute").click()
    status = devices.locator(".live-responses-table .response .response-col_status").first
    status.wait_for(timeout=30_000)
    assert status.inner_text().strip() == "200"
    assert json.loads(devices.locator(".live-responses-table .microlight").first.inner_text()) == {"items": []}
    # The same request without the key is refused: the page sent the key it was given.
    assert _status(f"{base}/v1/devices") == 401
    assert elsewhere == []

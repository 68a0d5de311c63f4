"""The Airflow UI in a real browser: Debian's Chromium, headless, driven by Playwright for Python.

Shared by the e2e suite (Airflow started as processes) and the compose suite (Airflow in containers).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = os.environ.get("AIRFLOW_MPI_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
UI_TIMEOUT_MS = 60_000


@contextlib.contextmanager
def chromium() -> Iterator:
    """A headless Chromium (never `playwright install`: the Debian package's binary)."""
    if not Path(CHROMIUM).exists():
        raise FileNotFoundError(
            f"Chromium not found at {CHROMIUM}: run scripts/bootstrap (Debian package chromium)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def logged_in_page(browser, base_url: str, username: str, password: str) -> Iterator:
    """A page of a fresh browser context, logged in to the Airflow UI at ``base_url``."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, base_url=base_url)
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    try:
        page.goto("/auth/login")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/auth/login" not in url)
        yield page
    finally:
        context.close()

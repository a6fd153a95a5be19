"""The inspector's browser tests: headless Chromium (Debian's) driven by playwright.

``browser`` launches the system chromium (``$HELIX_CHROMIUM``, else
``chromium`` or ``chromium-browser`` on ``PATH``): playwright's own browser
downloads are never used. Without chromium or playwright the tests skip,
saying why, unless ``CI`` is set: in CI they must run, so they fail.

``page`` fails its test when the page threw a JavaScript error, and saves a
screenshot of a failed test under ``build/test-artifacts/browser/`` (or
``$HELIX_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

ARTIFACTS = Path(
    os.environ.get("HELIX_TEST_ARTIFACTS")
    or Path(__file__).parents[2] / "build" / "test-artifacts" / "browser"
)


def chromium_executable() -> str | None:
    """The chromium to drive, or None when there is none."""
    given = os.environ.get("HELIX_CHROMIUM")
    if given:
        return given
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _unavailable(reason: str) -> None:
    if "CI" in os.environ:
        pytest.fail(f"{reason}, and CI must run the browser tests (.ci/run installs chromium)")
    pytest.skip(f"{reason}; the browser tests run in CI")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    """Keep each phase's report on the item, so ``page`` knows if the test failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """A headless chromium, closed after the test."""
    executable = chromium_executable()
    if executable is None:
        _unavailable("chromium is not installed (apt-get install -y chromium)")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[dev]')")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Any, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A fresh page; a screenshot is saved if the test fails; a JavaScript error fails it."""
    context = await browser.new_context(viewport={"width": 1200, "height": 900})
    opened = await context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield opened
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            await anyio.Path(ARTIFACTS).mkdir(parents=True, exist_ok=True)
            shot = ARTIFACTS / f"{request.node.name}.png"
            await opened.screenshot(path=str(shot), full_page=True)
            print(f"screenshot: {shot}")
        assert not errors, f"the page threw: {errors}"
    finally:
        await context.close()

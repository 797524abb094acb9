"""Headless Chromium against the real server: the fixtures every browser test shares.

Debian's chromium and chromium-driver (installed by .ci/run) are driven by
Selenium, with the paths given so Selenium Manager never downloads anything.
Without them a developer's run skips these tests with the reason; in CI
(``CI=true``, or ``LIVEGEN_REQUIRE_BROWSER=1`` as .ci/run sets) a missing
browser fails instead, so the suite cannot go green
by not running them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from page_browser import CHROMEDRIVER, CHROMIUM, Browser, require_browser


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture
def open_browser(tmp_path: Path) -> Iterator[Callable[..., Browser]]:
    """Start headless Chromium sessions; ``fake_audio`` is a WAV file the fake microphone plays once."""
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    screens = tmp_path / "screens"
    screens.mkdir()
    drivers: list[Any] = []

    def start(fake_audio: Path | None = None, width: int = 1280, height: int = 900) -> Browser:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            "--autoplay-policy=no-user-gesture-required",
            f"--user-data-dir={tmp_path / f'profile-{len(drivers)}'}",
            f"--window-size={width},{height}",
            "--use-fake-ui-for-media-stream",
            "--use-fake-device-for-media-stream",
        ):
            options.add_argument(flag)
        if fake_audio is not None:
            # %noloop: the question is asked once, then the microphone is silent.
            options.add_argument(f"--use-file-for-fake-audio-capture={fake_audio}%noloop")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = Service(executable_path=str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log"))
        driver = webdriver.Chrome(service=service, options=options)
        drivers.append(driver)
        return Browser(driver, screens)

    yield start
    for driver in drivers:
        driver.quit()

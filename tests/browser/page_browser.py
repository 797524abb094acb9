"""A headless Chromium session with the helpers the page tests need (importable, unlike conftest)."""

from __future__ import annotations

import io
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

CHROMIUM = Path(os.environ.get("LIVEGEN_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("LIVEGEN_CHROMEDRIVER", "/usr/bin/chromedriver"))
#: Set to a folder to get a copy of every screenshot there (they are always kept under tmp_path).
SCREENS_ENV = "LIVEGEN_SCREENS_DIR"


def require_browser() -> None:
    """Skip without Chromium on a developer's machine; fail in CI, which installs it."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if not missing:
        return
    reason = (
        f"headless Chromium is not installed ({', '.join(missing)} missing): "
        "apt-get install chromium chromium-driver"
    )
    if os.environ.get("CI", "").lower() == "true" or os.environ.get("LIVEGEN_REQUIRE_BROWSER") == "1":
        pytest.fail(f"CI must run the browser tests, but {reason}")
    pytest.skip(reason)


class Browser:
    """One headless Chromium session with the helpers the page tests need."""

    def __init__(self, driver: Any, screens: Path) -> None:
        self.driver = driver
        self.screens = screens

    def open(self, url: str) -> None:
        self.driver.get(url)

    def find(self, test_id: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, f"[data-testid={test_id}]")

    def find_all(self, test_id: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, f"[data-testid={test_id}]"))

    def text(self, test_id: str) -> str:
        return str(self.find(test_id).text)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait_for(
        self,
        condition: Callable[[], Any],
        timeout: float = 30.0,
        what: str = "",
        explain: Callable[[], Any] | None = None,
    ) -> Any:
        """Poll until ``condition()`` is truthy; fail with the page's status and console if it never is,
        and with ``explain()``'s account of the page's state then (what a timeout alone cannot say)."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                status = self.text("status")
                account = f"\nthe page's state: {explain()}" if explain is not None else ""
                pytest.fail(f"timed out waiting for {what}; status: {status!r}{account}\n{self.console()}")
            time.sleep(0.1)

    def console(self) -> str:
        try:
            entries = self.driver.get_log("browser")
        except Exception:  # the log endpoint is optional in chromedriver
            return ""
        return "\n".join(f"{e['level']}: {e['message']}" for e in entries)

    def screenshot(self, name: str, test_id: str | None = None) -> Image.Image:
        """Save a screenshot (of the page, or of one element) and return it as an image."""
        png = self.find(test_id).screenshot_as_png if test_id else self.driver.get_screenshot_as_png()
        path = self.screens / f"{name}.png"
        path.write_bytes(png)
        copy_to = os.environ.get(SCREENS_ENV)
        if copy_to:
            Path(copy_to).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(copy_to) / path.name)
        return Image.open(io.BytesIO(png)).convert("RGB")

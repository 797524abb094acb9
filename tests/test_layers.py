"""The layering rules of DESIGN.md section 2, checked by the project's own lint config."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = [sys.executable, "-m", "ruff"] if shutil.which("ruff") is None else ["ruff"]


def _ruff_on(path: str, source: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RUFF, "check", "--no-cache", "--select", "TID251", "--stdin-filename", path, "-"],
        input=source,
        text=True,
        capture_output=True,
        cwd=ROOT,
    )


@pytest.mark.parametrize("core", ["world", "voice", "protocol"])
@pytest.mark.parametrize("module", ["asyncio", "time", "random", "uuid", "threading"])
def test_sans_io_cores_refuse_io_modules(core: str, module: str) -> None:
    result = _ruff_on(f"src/livegen/{core}/probe.py", f"import {module}\n")
    assert result.returncode == 1
    assert "TID251" in result.stdout and module in result.stdout


def test_from_import_is_refused_too() -> None:
    result = _ruff_on("src/livegen/world/probe.py", "from asyncio import Queue\n")
    assert result.returncode == 1


@pytest.mark.parametrize("layer", ["runtime", "server"])
def test_io_layers_may_use_asyncio(layer: str) -> None:
    result = _ruff_on(f"src/livegen/{layer}/probe.py", "import asyncio\n")
    assert result.returncode == 0, result.stdout

"""The shape of the outer rooms (issue 38), checked on the source tree: ``server/`` by concern, with
at most ``MAX_TOP`` modules at its top and at most ``MAX_FOLDER`` in any of its folders, so that a
newcomer finds the app, the HTTP edge, the WebSockets, WebRTC, worlds and the audio API each in one
place."""

from __future__ import annotations

from pathlib import Path

SERVER = Path(__file__).resolve().parents[1] / "src" / "livegen" / "server"
MAX_TOP = 10
MAX_FOLDER = 8


def modules(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py")


def test_server_has_few_modules_at_its_top() -> None:
    top = modules(SERVER)
    assert len(top) <= MAX_TOP, f"server/ has {len(top)} top-level modules (at most {MAX_TOP}): {top}"


def test_no_server_folder_is_crowded() -> None:
    folders = [p for p in SERVER.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert folders, "server/ is split by concern into packages"
    crowded = {f.name: modules(f) for f in folders if len(modules(f)) > MAX_FOLDER}
    assert not crowded, f"server/ folders over {MAX_FOLDER} modules: {crowded}"


def test_every_server_folder_says_what_it_owns() -> None:
    for folder in (p for p in SERVER.iterdir() if (p / "__init__.py").exists()):
        assert (folder / "__init__.py").read_text().startswith('"""'), f"{folder.name}/ has no docstring"

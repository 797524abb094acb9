"""``livegen world`` against the real server: a script in, PNG frames and a GIF out, the same every time."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from PIL import Image

from livegen.cli import main
from livegen.cli.world import parse_script
from livegen.server.config import ServerConfig
from livegen.server.thread import ServerThread
from sharing import Registries

SCRIPT = [
    {"action": "right", "chunks": 2},
    {"prompt": "ocean", "chunks": 1},
    {"reset": True, "chunks": 2},
    {"action": "down"},
]


@pytest.fixture(scope="module")
def world_server(registries: Registries) -> object:
    # pinned: these tests check procedural-world's exact frames and state (whatever the default is)
    config = ServerConfig(api_key=None, world_model="procedural-world")
    with ServerThread(config, registries.for_config(config)) as server:  # the run's voice model
        server.wait_ready()
        yield server


def run(server: ServerThread, tmp_path: Path, name: str) -> Path:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    out = tmp_path / name
    result = CliRunner().invoke(
        main, ["world", "--url", server.ws_url, "--script", str(script), "--seed", "4", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "7 chunks, 28 frames from procedural-world" in result.output
    return out


def test_saves_frames_and_a_gif(world_server: ServerThread, tmp_path: Path) -> None:
    out = run(world_server, tmp_path, "a")
    pngs = sorted(out.glob("frame_*.png"))
    assert len(pngs) == 28
    with Image.open(pngs[0]) as first:
        assert first.size == (256, 256)
    with Image.open(out / "world.gif") as gif:
        assert gif.n_frames > 1 and gif.is_animated
    again = run(world_server, tmp_path, "b")
    assert [p.read_bytes() for p in pngs] == [p.read_bytes() for p in sorted(again.glob("frame_*.png"))]


def test_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["world", "--url", "ws://127.0.0.1:9", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "cannot reach" in result.output


def test_script_steps_become_numbered_events() -> None:
    steps = parse_script(
        [{"action": "up"}, {"reset": True, "chunks": 0}, {"prompt": "lava", "event_id": 9}, {}]
    )
    assert steps[0].event == {
        "event_id": 1,
        "controls": [{"track": "action", "schema": "livegen.action.v1", "data": {"action": "up"}}],
    }
    assert steps[1].is_reset and steps[1].num_chunks == 0
    assert steps[2].event == {"event_id": 9, "prompt": "lava"}
    assert steps[3].event is None
    with pytest.raises(click.BadParameter):
        parse_script([{"chunks": -1}])


def test_api_key_is_sent_and_a_wrong_one_is_a_clear_error(
    start_server: Callable[..., ServerThread], tmp_path: Path
) -> None:
    server = start_server(api_key="sesame")
    server.wait_ready()
    script = tmp_path / "script.json"
    script.write_text('[{"action": "up"}]')
    args = ["world", "--url", server.ws_url, "--script", str(script), "--out", str(tmp_path / "o")]
    refused = CliRunner().invoke(main, [*args, "--api-key", "wrong"])
    assert refused.exit_code != 0 and "HTTP 401" in refused.output and "--api-key" in refused.output
    allowed = CliRunner().invoke(main, [*args, "--api-key", "sesame"])
    assert allowed.exit_code == 0, allowed.output
    assert "2 chunks, 8 frames" in allowed.output

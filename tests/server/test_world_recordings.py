"""Server-side recordings over the wire (issue 29): ``session.update`` ``recording: true``.

A recorded tiny-world session's video decodes to the frames the player was
sent (within H.264's error: the codec is lossy, so a frame's mean absolute
difference is bounded, not zero), its events log replays to the same frames
(``livegen world replay`` exits 0, and 1 once the log is tampered with),
both are served with the API key, retention drops the oldest, and a disk that
fails ends the recording, never the session.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from livegen.client.world import WorldClient, WorldError
from livegen.protocol import world as wire
from livegen.runtime.world import recording
from livegen.runtime.world.video import read_frames
from livegen.server.thread import ServerThread

KEY = "sk-recordings"
RIGHT = {"track": "action", "schema": "livegen.action.v1", "data": {"action": "right"}}
DOWN = {"track": "action", "schema": "livegen.action.v1", "data": {"action": "down"}}
StartServer = Callable[..., ServerThread]
#: A frame's mean absolute difference (0-255) H.264 at CRF 18 in yuv420p may leave on the room game.
VIDEO_TOLERANCE = 12.0


async def play_recorded(
    server: ServerThread, *, key: str | None = KEY, chunks: int = 6
) -> tuple[str, list[Any]]:
    """A session that records itself: events on chunks 1 and 3, a reset after chunk 4; returns the
    recording id and every frame the player was sent, in order."""
    client = await WorldClient.connect(server.ws_url, api_key=key, auto_ack=False)
    sent: list[np.ndarray] = []
    async with client:
        await client.create(
            seed=9,
            prompt="a forest",
            pacing="asap",
            max_chunks_ahead=1,
            output={"format": "rgb24"},
            recording=True,
        )
        assert client.recording is not None and client.recording.video_format == "mp4"
        for index in range(chunks):
            chunk = await client.next_chunk()
            sent.extend(chunk.frames)
            if index in (1, 3):
                await client.event(index, controls=[RIGHT if index == 1 else DOWN])
            if index == 4:
                await client.reset()
                continue
            await client.send({"type": "chunk.ack", "chunk_index": chunk.header.chunk_index})
        await client.close()
        return client.recording.recording_id, sent


def recording_dir(root: Path, recording_id: str) -> Path:
    return root / recording_id


async def until_ended(directory: Path) -> list[dict[str, Any]]:
    """The events log once its writer wrote the last line."""
    for _ in range(400):
        lines = [json.loads(line) for line in (directory / "events.jsonl").read_text().splitlines()]
        if lines and lines[-1]["type"] in ("recording.end", "recording.failed"):
            return lines
        await asyncio.sleep(0.05)
    raise AssertionError("the recording never ended")


@pytest.mark.slow
async def test_a_recorded_session_decodes_to_the_frames_sent_and_replays_to_them(
    start_server: StartServer, tmp_path: Path
) -> None:
    root = tmp_path / "recordings"
    server = start_server(
        api_key=KEY, world_model="tiny-world", voice_model="none", world_recordings=str(root)
    )
    server.wait_ready()
    recording_id, sent = await play_recorded(server)
    directory = recording_dir(root, recording_id)
    lines = await until_ended(directory)
    header = lines[0]
    assert header["model"] == "tiny-world" and header["seed"] == 9 and len(header["weights_digest"]) == 64
    chunks = [line for line in lines if line["type"] == "world.chunk"]
    assert [c["chunk_index"] for c in chunks] == [0, 1, 2, 3, 4, 0]
    assert [c["applied_event_ids"] for c in chunks] == [[], [], [1], [], [3], []]
    assert all(c["request_id"].startswith("ar-") and "model_ms" in c["timings"] for c in chunks)

    decoded = read_frames(directory / "video.mp4")
    assert len(decoded) == len(sent) == 24
    errors = [float(np.abs(a.astype(int) - b.astype(int)).mean()) for a, b in zip(decoded, sent, strict=True)]
    assert max(errors) < VIDEO_TOLERANCE, errors

    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        video = await http.get(f"/v1/worlds/recordings/{recording_id}", headers=headers)
        events = await http.get(f"/v1/worlds/recordings/{recording_id}/events", headers=headers)
        unauthorised = await http.get(f"/v1/worlds/recordings/{recording_id}")
    assert video.status_code == 200 and video.headers["content-type"] == "video/mp4"
    assert video.content == (directory / "video.mp4").read_bytes()
    assert events.status_code == 200 and events.text == (directory / "events.jsonl").read_text()
    assert unauthorised.status_code == 401

    replayed = await replay(directory)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "MATCH: 6 chunks, 24 frames" in replayed.stdout

    tampered = tmp_path / "tampered.jsonl"  # the event chunk 2 applied now says "down", not "right"
    tampered.write_text((directory / "events.jsonl").read_text().replace('"right"', '"down"', 1))
    failed = await replay(tampered)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "MISMATCH after 2 matching chunks: chunk 2" in failed.stdout


async def replay(path: Path) -> subprocess.CompletedProcess[str]:
    """``livegen world replay PATH`` as a user runs it: its own process, its exit status."""
    command = [sys.executable, "-m", "livegen", "world", "replay", str(path), "--no-progress"]
    return await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=300)


async def test_recording_without_the_server_option_is_refused_by_name(start_server: StartServer) -> None:
    server = start_server(world_model="procedural-world", voice_model="none")
    server.wait_ready()
    client = await WorldClient.connect(server.ws_url)
    async with client:
        with pytest.raises(WorldError) as refused:
            await client.create(recording=True)
        assert refused.value.body.code == "recordings_disabled"
        assert "--world-recordings" in refused.value.body.message
        assert refused.value.body.param == "session.recording"
        created = await client.create(pacing="asap")  # nothing was created: this one is the session
        assert (await client.next_chunk()).header.chunk_index == 0 and created["id"]
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        off = await http.get("/v1/worlds/recordings/rec_0000000000000000aaaaaaaa")
    assert off.status_code == 404 and "--world-recordings" in off.json()["error"]["message"]


async def test_a_recording_id_that_is_not_there_is_a_clear_404(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = start_server(
        api_key=KEY, world_model="procedural-world", voice_model="none", world_recordings=str(tmp_path)
    )
    server.wait_ready()
    (tmp_path / "secret.txt").write_text("not a recording")
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        for path in ("rec_0000000000000000aaaaaaaa", "rec_0000000000000000aaaaaaaa/events", "secret.txt"):
            answer = await http.get(f"/v1/worlds/recordings/{path}", headers=headers)
            assert answer.status_code == 404, path
            assert answer.json()["error"]["code"] == "recording_not_found"
        escaping = await http.get("/v1/worlds/recordings/..%2Fsecret.txt", headers=headers)
        assert escaping.status_code == 404 and "not a recording" not in escaping.text


async def test_retention_deletes_the_oldest_recordings_first(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = start_server(
        world_model="procedural-world",
        voice_model="none",
        world_recordings=str(tmp_path),
        world_recordings_max_count=2,
    )
    server.wait_ready()
    made = []
    for _ in range(3):
        recording_id, _sent = await play_recorded(server, key=None, chunks=2)
        await until_ended(tmp_path / recording_id)
        made.append(recording_id)
    for _ in range(100):  # the last writer prunes once its files are closed
        if not (tmp_path / made[0]).exists():
            break
        await asyncio.sleep(0.05)
    assert sorted(os.listdir(tmp_path)) == made[1:]
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        assert (await http.get(f"/v1/worlds/recordings/{made[0]}")).status_code == 404
        assert (await http.get(f"/v1/worlds/recordings/{made[2]}")).status_code == 200


async def test_a_disk_error_ends_the_recording_and_the_session_goes_on(
    start_server: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    real_write = recording.write_frames

    def full_disk(video: Any, frames: Any) -> None:
        nonlocal calls
        calls += 1
        if calls >= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(video, frames)

    monkeypatch.setattr(recording, "write_frames", full_disk)
    server = start_server(world_model="procedural-world", voice_model="none", world_recordings=str(tmp_path))
    server.wait_ready()
    client = await WorldClient.connect(server.ws_url)
    async with client:
        await client.create(pacing="asap", recording=True)
        assert client.recording is not None
        failed = await client.expect(wire.RecordingFailed, wait_s=30)
        assert failed.recording_id == client.recording.recording_id
        assert failed.code == "recording_write_failed" and "No space left" in failed.message
        first = (await client.next_chunk()).header.chunk_index
        for _ in range(10):  # the session goes on, chunk after chunk
            assert (await client.next_chunk()).header.chunk_index > first
        accepted = await client.action(1, "right")
        assert accepted.status == "accepted"
    lines = await until_ended(tmp_path / client.recording.recording_id)
    assert lines[-1]["type"] == "recording.failed" and lines[-1]["code"] == "recording_write_failed"


async def test_a_recording_that_cannot_keep_up_ends_and_the_session_goes_on(
    start_server: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recording, "MAX_QUEUED_BYTES", 1024)  # less than one chunk of frames
    server = start_server(world_model="procedural-world", voice_model="none", world_recordings=str(tmp_path))
    server.wait_ready()
    client = await WorldClient.connect(server.ws_url)
    async with client:
        await client.create(pacing="asap", recording=True)
        assert client.recording is not None
        failed = await client.expect(wire.RecordingFailed, wait_s=30)
        assert failed.code == "recording_too_slow"
        for index in range(5):
            assert (await client.next_chunk()).header.chunk_index == index
    lines = await until_ended(tmp_path / client.recording.recording_id)
    assert lines[-1]["type"] == "recording.failed" and lines[-1]["code"] == "recording_too_slow"


async def test_recording_is_fixed_once_the_session_exists(start_server: StartServer, tmp_path: Path) -> None:
    server = start_server(world_model="procedural-world", voice_model="none", world_recordings=str(tmp_path))
    server.wait_ready()
    client = await WorldClient.connect(server.ws_url)
    async with client:
        await client.create(pacing="asap")
        await client.send({"type": "session.update", "session": {"recording": True}})
        with pytest.raises(WorldError) as refused:
            await client.expect(wire.SessionUpdated)
        assert refused.value.body.param == "session.recording" and "fixed" in refused.value.body.message
        await client.send({"type": "session.update", "session": {"recording": False}})
        assert isinstance(await client.expect(wire.SessionUpdated), wire.SessionUpdated)
    assert os.listdir(tmp_path) == []

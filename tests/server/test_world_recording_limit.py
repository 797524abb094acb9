"""Recordings being written count against ``--world-recordings-max-bytes`` (issue 37: recordings
that fill the disk). Before, retention only ever deleted finished recordings and a recording
being written grew without bound: one long session, or many at once, filled the disk.

A real server of the procedural world, recording over the wire (``session.update``
``recording: true``), its byte budget a few chunks' worth.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from test_world_recordings import until_ended

from livegen.client.world import WorldClient
from livegen.protocol import world as wire
from livegen.server.thread import ServerThread

#: The recordings' budget: a few chunks of the procedural world's video.
MAX_BYTES = 64 * 1024


def size(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


async def test_a_recording_that_outgrows_the_byte_budget_ends_and_the_session_goes_on(
    start_server: Callable[..., ServerThread], tmp_path: Path
) -> None:
    server = start_server(
        world_model="procedural-world",
        voice_model="none",
        world_recordings=str(tmp_path),
        world_recordings_max_bytes=MAX_BYTES,
    )
    server.wait_ready()
    client = await WorldClient.connect(server.ws_url)
    async with client:
        await client.create(pacing="asap", recording=True)
        assert client.recording is not None
        failed = await client.expect(wire.RecordingFailed, wait_s=60)
        assert failed.recording_id == client.recording.recording_id
        assert failed.code == "recording_limit_reached" and str(MAX_BYTES) in failed.message
        first = (await client.next_chunk()).header.chunk_index
        for _ in range(5):  # the session goes on, chunk after chunk
            assert (await client.next_chunk()).header.chunk_index > first
    lines = await until_ended(tmp_path / client.recording.recording_id)
    assert lines[-1]["type"] == "recording.failed" and lines[-1]["code"] == "recording_limit_reached"
    # What it wrote stays (it ended before the chunk that would cross the budget), within it but
    # for its last lines and the video's trailer.
    chunk_lines = [line for line in lines if line["type"] == "world.chunk"]
    assert chunk_lines and lines[0]["type"] == "recording.header"
    assert size(tmp_path) <= MAX_BYTES + 4096, (size(tmp_path), len(chunk_lines))

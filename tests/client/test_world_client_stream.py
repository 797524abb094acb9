"""The world client's reader on a stream it cannot follow: a clear StreamError, not a dead reader."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import websockets
from websockets.frames import Close

from livegen.client.world import StreamError, WorldClient
from livegen.protocol import world as wire
from livegen.protocol.frames import encode_frame


class ScriptedConnection:
    """Plays server messages from a list, then reports the connection closed."""

    def __init__(self, messages: list[str | bytes]) -> None:
        self.messages = list(messages)
        self.sent: list[str] = []

    async def recv(self) -> str | bytes:
        await asyncio.sleep(0)
        if not self.messages:
            raise websockets.ConnectionClosed(Close(1000, ""), None)
        return self.messages.pop(0)

    async def send(self, message: str) -> None:
        self.sent.append(message)

    async def close(self) -> None:
        self.messages.clear()


def header(chunk_index: int, fmt: str, num_frames: int = 1) -> str:
    return wire.encode(
        wire.ChunkHeader(
            chunk_index=chunk_index,
            request_id=f"r{chunk_index}",
            applied_event_ids=[],
            num_frames=num_frames,
            width=32,
            height=32,
            format=fmt,  # type: ignore[arg-type]
            media_time_ms=0.0,
            timings=wire.Timings(0.0, 0.0, 0.0),
        )
    ).decode()


FRAME = np.zeros((32, 32, 3), dtype=np.uint8)


async def test_good_chunks_are_read_and_acked() -> None:
    connection = ScriptedConnection([header(0, "rgb24"), encode_frame(FRAME, "rgb24")])
    client = WorldClient(connection)
    chunk = await client.next_chunk(wait_s=5)
    assert chunk.header.chunk_index == 0 and chunk.frames[0].shape == (32, 32, 3)
    with pytest.raises(ConnectionError, match="server closed"):
        await client.next_chunk(wait_s=5)
    assert client.failure is None
    await client.disconnect()


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (
            [header(0, "rgb24"), encode_frame(FRAME, "jpeg")],
            r"chunk 0: frame 1 of 1 \(\d+ bytes\) .* rgb24 32x32",
        ),
        ([header(3, "png"), b"not a png"], r"chunk 3: frame 1 of 1 \(9 bytes\) .* png"),
        ([header(1, "rgb24"), header(2, "rgb24")], r"chunk 1: frame 1 of 1 \(text of \d+ chars\)"),
        ([encode_frame(FRAME, "jpeg")], r"a binary message is not a server event"),
    ],
)
async def test_a_stream_out_of_step_raises_stream_error(messages: list[str | bytes], expected: str) -> None:
    client = WorldClient(ScriptedConnection([*messages, header(9, "rgb24"), encode_frame(FRAME, "rgb24")]))
    with pytest.raises(StreamError, match=expected):
        await client.next_chunk(wait_s=5)
    with pytest.raises(StreamError, match=expected):
        await client.next_event(wait_s=5)
    assert isinstance(client.failure, StreamError)
    await client.disconnect()  # the reader stopped cleanly: nothing is raised here

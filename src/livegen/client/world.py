"""An async client for world sessions at ``/v1/worlds``.

A reader task splits the server's stream into two queues: chunks (the
``world.chunk`` header with its decoded frames, assembled from the binary
messages that follow it) and every other event. With ``auto_ack`` (the
default) each chunk is acknowledged as it is read, so flow control never
stalls a client that keeps up.

A stream the reader cannot follow (a frame that does not decode as its
header says, a message that is not a server event) stops the reader: the
next ``next_chunk``/``next_event`` raises ``StreamError`` saying what went
wrong, since no later message can be trusted to line up with its header.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import websockets

from livegen.protocol import world as wire
from livegen.protocol.frames import decode_frame


@dataclass
class ChunkOut:
    header: wire.ChunkHeader
    frames: list[np.ndarray]
    raw: list[bytes]


class WorldError(Exception):
    """The server answered with an ``error`` event."""

    def __init__(self, body: wire.ErrorBody) -> None:
        super().__init__(f"{body.code}: {body.message}")
        self.body = body
        self.code = body.code


class StreamError(ConnectionError):
    """The server's stream could not be followed; the reader has stopped."""


def _decode_frames(header: wire.ChunkHeader, raw: list[bytes | str]) -> list[np.ndarray]:
    frames = []
    for index, data in enumerate(raw):
        try:
            if not isinstance(data, bytes):
                raise TypeError("a text message came where a binary frame was due")
            frames.append(decode_frame(data, header.format, header.width, header.height))
        except (ValueError, TypeError, OSError) as exc:  # OSError: Pillow's UnidentifiedImageError
            size = f"{len(data)} bytes" if isinstance(data, bytes) else f"text of {len(data)} chars"
            raise StreamError(
                f"world.chunk {header.chunk_index}: frame {index + 1} of {header.num_frames} ({size}) "
                f"does not decode as {header.format} {header.width}x{header.height}: {exc}"
            ) from exc
    return frames


class WorldClient:
    def __init__(self, connection: Any, *, auto_ack: bool = True) -> None:
        self._ws = connection
        self.auto_ack = auto_ack
        self.events: asyncio.Queue[wire.ServerEvent | None] = asyncio.Queue()
        self.chunks: asyncio.Queue[ChunkOut | None] = asyncio.Queue()
        self.session: dict[str, Any] = {}
        #: ``recording.started`` of a session created with ``recording=True``.
        self.recording: wire.RecordingStarted | None = None
        #: ``player.joined`` of a client that joined another's session (``join``).
        self.joined: wire.PlayerJoined | None = None
        #: Why the reader stopped early, when the stream could not be followed.
        self.failure: StreamError | None = None
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, url: str, *, api_key: str | None = None, auto_ack: bool = True) -> WorldClient:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        connection = await websockets.connect(
            url.rstrip("/") + ("" if url.endswith("/v1/worlds") else "/v1/worlds"),
            additional_headers=headers,
            max_size=16 * 1024 * 1024,
        )
        return cls(connection, auto_ack=auto_ack)

    @classmethod
    async def join(cls, server_url: str, join_url: str, *, api_key: str | None = None) -> WorldClient:
        """Join another's session as a player: ``join_url`` is a ``session.player_token.created``
        ``url``; ``self.joined`` is the answer (``player.joined``: its player number and tracks)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        url = server_url.rstrip("/").removesuffix("/v1/worlds") + join_url
        connection = await websockets.connect(url, additional_headers=headers, max_size=16 * 1024 * 1024)
        client = cls(
            connection, auto_ack=False
        )  # flow control is the owner's: a player's acks change nothing
        client.joined = await client.expect(wire.PlayerJoined)
        client.session = client.joined.session
        return client

    async def player_token(self) -> wire.PlayerTokenCreated:
        """A token (and join URL) another player joins this session with; it replaces the last."""
        await self.send({"type": "session.player_token"})
        token: wire.PlayerTokenCreated = await self.expect(wire.PlayerTokenCreated)
        return token

    async def __aenter__(self) -> WorldClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.disconnect()

    async def _read(self) -> None:
        try:
            while True:
                message = await self._ws.recv()
                try:
                    event = wire.decode_server(message)
                except msgspec.DecodeError as exc:
                    kind = "binary" if isinstance(message, bytes) else "text"
                    raise StreamError(f"a {kind} message is not a server event: {exc}") from exc
                if isinstance(event, wire.ChunkHeader):
                    raw = [await self._ws.recv() for _ in range(event.num_frames)]
                    frames = _decode_frames(event, raw)
                    if self.auto_ack:  # a server closing meanwhile: what it sent before is still read
                        with contextlib.suppress(websockets.ConnectionClosed):
                            await self.send_raw(wire.encode(wire.ChunkAck(event.chunk_index)))
                    self.chunks.put_nowait(ChunkOut(event, frames, raw))
                else:
                    self.events.put_nowait(event)
        except websockets.ConnectionClosed:
            pass
        except StreamError as error:
            self.failure = error
        finally:
            self.events.put_nowait(None)
            self.chunks.put_nowait(None)

    async def send_raw(self, message: str | bytes) -> None:
        """Send one message as is (text for ``str`` and for encoded JSON ``bytes``)."""
        await self._ws.send(message.decode() if isinstance(message, bytes) else message)

    async def send(self, event: wire.ClientEvent | dict[str, Any]) -> None:
        data = msgspec.json.encode(event) if isinstance(event, dict) else wire.encode(event)
        await self.send_raw(data)

    async def next_event(self, wait_s: float = 10.0) -> wire.ServerEvent:
        async with asyncio.timeout(wait_s):
            event = await self.events.get()
        if event is None:
            raise self._ended()
        return event

    async def next_chunk(self, wait_s: float = 10.0) -> ChunkOut:
        async with asyncio.timeout(wait_s):
            chunk = await self.chunks.get()
        if chunk is None:
            raise self._ended()
        return chunk

    def _ended(self) -> ConnectionError:
        if self.failure is not None:
            error = StreamError(str(self.failure))
            error.__cause__ = self.failure
            return error
        return ConnectionError("the server closed the connection")

    async def expect(self, event_type: type[wire.ServerEvent], wait_s: float = 10.0) -> Any:
        """The next non-chunk event, which must be of ``event_type`` (an error raises ``WorldError``)."""
        event = await self.next_event(wait_s)
        if isinstance(event, event_type):
            return event
        if isinstance(event, wire.Error):
            raise WorldError(event.error)
        raise AssertionError(f"expected {event_type.__name__}, got {event}")

    async def create(self, **session: Any) -> dict[str, Any]:
        """Send ``session.update`` and wait for ``session.created``; returns the effective config."""
        await self.send({"type": "session.update", "session": session})
        created = await self.expect(wire.SessionCreated)
        self.session = created.session
        if session.get("recording"):  # announced right after session.created
            self.recording = await self.expect(wire.RecordingStarted)
        return self.session

    async def event(
        self, event_id: int, prompt: str | None = None, controls: list[dict[str, Any]] | None = None
    ) -> wire.EventAccepted:
        message: dict[str, Any] = {"type": "world.event", "event_id": event_id}
        if prompt is not None:
            message["prompt"] = prompt
        if controls:
            message["controls"] = controls
        await self.send(message)
        accepted: wire.EventAccepted = await self.expect(wire.EventAccepted)
        return accepted

    async def action(self, event_id: int, action: str) -> wire.EventAccepted:
        control = {"track": "action", "schema": "livegen.action.v1", "data": {"action": action}}
        return await self.event(event_id, controls=[control])

    async def reset(self) -> None:
        await self.send({"type": "world.reset"})
        await self.expect(wire.ResetDone)

    async def close(self) -> None:
        await self.send({"type": "session.close"})
        await self.expect(wire.SessionClosed)

    async def disconnect(self) -> None:
        await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

"""A world session's one ordered path to its client: the send queue, chunk encoding, the writer.

The runner (``runner.py``) decides what to send; this module owns how it gets
there. Output is bounded in bytes, not only in events: ``unsent_bytes`` counts
what is queued for the socket (``runtime/outbox.py``) and not yet written (a
queued chunk counts its raw frames until it is encoded, then its encoded bytes).
Past ``max_unsent_bytes`` or ``MAX_QUEUED_EVENTS`` the outbox refuses, the
sender sets ``is_overflowing`` and ``overflowed``; the runner stops stepping
and the endpoint closes the socket (``server/http/budgets.py``).

Frames are encoded in a thread by Pillow (libjpeg-turbo for JPEG), off the
event loop, with the session's output settings as they were when the chunk's
encoding began. A chunk's header goes to the session's taps (its recording, its
spectators) before the client's socket, which may be slow. What the sender
needs of its runner is the narrow ``Parent`` below, so it imports no runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from livegen.errors import LivegenError, ProtocolError
from livegen.logs import log_event
from livegen.models.world import Chunk, WorldSpec
from livegen.protocol import world as wire
from livegen.protocol.frames import encode_chunk
from livegen.runtime.outbox import Bounds, Outbox
from livegen.runtime.world.taps import Tap
from livegen.tasks import TaskSet
from livegen.world import Output
from livegen.world.flow import FlowControl

logger = logging.getLogger("livegen.world")
SendText = Callable[[str], Awaitable[None]]
SendBytes = Callable[[bytes], Awaitable[None]]
#: Events (not chunks: flow control bounds those) queued for a client that does not read.
MAX_QUEUED_EVENTS = 1024


class Encoding(Protocol):
    """The output settings a chunk is encoded with (the runner's ``Options``)."""

    @property
    def format(self) -> str: ...

    @property
    def quality(self) -> int: ...


class Parent(Protocol):
    """What the sender reads of its runner: the session's spec and settings, its credit, its taps."""

    @property
    def session_id(self) -> str: ...

    @property
    def spec(self) -> WorldSpec: ...

    @property
    def options(self) -> Encoding: ...

    @property
    def flow(self) -> FlowControl: ...

    @property
    def taps(self) -> list[Tap]: ...


@dataclass
class _ChunkJob:
    output: Output
    queue_ms: float
    model_ms: float


class Sender:
    """The bounded queue of one session's messages to its client, and the task that writes them."""

    def __init__(
        self,
        parent: Parent,
        send_text: SendText,
        send_bytes: SendBytes,
        on_error: Callable[[str], None],
        max_unsent_bytes: int | None,
    ) -> None:
        self._parent = parent
        self._send_text = send_text
        self._send_bytes = send_bytes
        self._on_error = on_error
        self._outbox: Outbox[bytes | _ChunkJob] = Outbox(Bounds(MAX_QUEUED_EVENTS, max_unsent_bytes))
        self._task: asyncio.Task[None] | None = None
        self.num_chunks_sent = 0
        self.is_overflowing = False
        #: Set once the client is over a budget (events or bytes); the endpoint closes it.
        self.overflowed = asyncio.Event()

    @property
    def unsent_bytes(self) -> int:
        """Bytes queued for the socket and not yet written."""
        return self._outbox.num_bytes

    def start(self, tasks: TaskSet) -> None:
        self._task = tasks.spawn(self._send_loop(), name=f"livegen-world-send-{self._parent.session_id}")

    def send(self, event: wire.ServerEvent) -> None:
        """Queue an event for the client; past ``MAX_QUEUED_EVENTS`` the client is not reading."""
        data = wire.encode(event)
        self._put(data, len(data))

    def chunk(self, output: Output, queue_ms: float, model_ms: float) -> None:
        """Queue a committed chunk, counted at its raw frames' size until it is encoded."""
        self._put(_ChunkJob(output, queue_ms, model_ms), _raw_bytes(output))

    def _put(self, item: bytes | _ChunkJob, size: int) -> None:
        """Queue a message; one past a bound (events or bytes) means the client is not reading."""
        if not self._outbox.put(item, size):
            self.is_overflowing = True  # other sessions go on; the runner stops stepping this one
            self.overflowed.set()

    def send_error(self, error: LivegenError) -> None:
        if isinstance(error, ProtocolError):
            body = error.to_error_body()
            self.queue_error(body["code"], body["message"], body["event_id"], body["type"], body["param"])
        else:
            self.queue_error("internal_error", str(error), None, "server_error")

    def queue_error(
        self,
        code: str,
        message: str,
        event_id: int | str | None,
        error_type: str = "invalid_request_error",
        param: str | None = None,
    ) -> None:
        self._on_error(code)
        self.send(wire.Error(wire.ErrorBody(error_type, code, message, param, event_id)))

    async def _send_loop(self) -> None:
        try:
            await self._outbox.send_all(self._write)
        except Exception as exc:  # the socket is gone; the endpoint sees the disconnect
            session = self._parent.session_id
            log_event(logger, "world.send_failed", logging.INFO, session=session, error=repr(exc))

    async def _write(self, item: bytes | _ChunkJob) -> None:
        if isinstance(item, bytes):
            await self._send_text(item.decode())
        else:
            await self._send_chunk(item)

    async def _send_chunk(self, job: _ChunkJob) -> None:
        chunk = job.output.output
        assert isinstance(chunk, Chunk)
        started = time.perf_counter()
        parent = self._parent
        options = parent.options  # this chunk's settings, though a session.update lands while it encodes
        frames = await asyncio.to_thread(encode_chunk, chunk.frames, options.format, options.quality)
        encode_ms = (time.perf_counter() - started) * 1000
        self._outbox.charge(sum(len(frame) for frame in frames) - _raw_bytes(job.output))
        meta, spec = job.output.meta, parent.spec
        header = wire.ChunkHeader(
            chunk_index=meta.chunk_index,
            request_id=meta.request_id,
            applied_event_ids=list(meta.applied_event_ids),
            num_frames=len(frames),
            width=spec.width,
            height=spec.height,
            format=options.format,  # type: ignore[arg-type]
            media_time_ms=spec.media_time_ms(meta.chunk_index),
            timings=wire.Timings(round(job.queue_ms, 3), round(job.model_ms, 3), round(encode_ms, 3)),
            prompt_transition=job.output.prompt_transition(),
            applied_events=[wire.AppliedEvent(player, event_id) for player, event_id in job.output.applied],
        )
        for tap in list(parent.taps):  # before the player's socket, which may be slow
            tap.chunk(header, chunk.frames, frames)
        await self._send_text(wire.encode(header).decode())
        for frame in frames:
            await self._send_bytes(frame)
            self._outbox.charge(-len(frame))
        parent.flow.written()
        self.num_chunks_sent += 1

    async def flush(self, grace_s: float) -> None:
        """Take no more, and wait (for up to ``grace_s``) for what is queued to be written."""
        self._outbox.close()
        if self._task is not None:
            with contextlib.suppress(TimeoutError, Exception):
                async with asyncio.timeout(grace_s):
                    await asyncio.shield(self._task)

    def abort(self) -> None:
        """Stop writing and drop what is queued (its memory goes now, not when the socket does)."""
        self._outbox.close()
        if self._task is not None:
            self._task.cancel()
        self._outbox.clear()

    def clear(self) -> None:
        self._outbox.clear()


def _raw_bytes(output: Output) -> int:
    chunk = output.output
    return int(chunk.frames.nbytes) if isinstance(chunk, Chunk) else 0

"""Server-side recordings of world sessions (``--world-recordings DIR``, ``session.update`` ``recording``).

A recording is a directory ``DIR/<recording_id>/`` holding:

- ``video.mp4`` (or ``.webm``): the frames the player was sent (``video.py``);
- ``events.jsonl``: JSON lines, the first a header (``recording.header``: the
  model, its weights digest, the seed, the prompt, the seed image, the chunk
  length, the model's options), then every accepted ``world.event`` as the
  client sent it, every chunk's header (applied event ids, request id,
  timings) with the sha256 of each of its RGB frames, each ``world.reset``,
  and a last ``recording.end`` (or ``recording.failed``) line.

That is what ``livegen world replay`` needs to re-run the session against
its model and check every frame (W6, ``replay.py``).

Nothing is written on the event loop. The runner hands each chunk to the
``Recorder`` (a ``Tap``, ``taps.py``), which queues it for the recording's own
writer thread; the queue is bounded in bytes (``MAX_QUEUED_BYTES``). A writer
that cannot keep up, or a disk that fails or fills, ends the recording with a
``recording.failed`` event to the player and a last line saying why; the
session goes on. ``Recordings`` owns the directory: ids, paths, and retention
(at most ``max_count`` recordings and ``max_bytes`` together, the oldest
finished ones deleted first; a recording being written is never deleted).
The recordings being written count against ``max_bytes`` too, as they grow:
after each chunk a writer reports its size, and one that would take the
directory past ``max_bytes`` once every finished recording that may go has
gone ends (``recording_limit_reached``, to the player; the session goes on).
Without it one long session, or many at once, filled the disk past any bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import queue
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from livegen.errors import ConfigError
from livegen.logs import log_event
from livegen.models.world import Frames
from livegen.protocol import world as wire
from livegen.runtime.world.video import VideoFormat, VideoWriter, best_format

logger = logging.getLogger("livegen.world")

EVENTS_FILE = "events.jsonl"
#: Raw frames and events a recording may have queued for its writer; past it the recording fails.
MAX_QUEUED_BYTES = 64 * 1024 * 1024
#: The share of ``max_bytes`` a recording being written keeps free for what its encoder and container
#: have not written yet (measured on the procedural world: 8 % of a 64 KiB recording at its end).
LIMIT_MARGIN = 0.15
#: What a recording id looks like: sortable by start (a time in hex), then random.
ID_PATTERN = re.compile(r"rec_[0-9a-f]{16}[0-9a-f]{8}")
#: Header format version of ``events.jsonl``.
VERSION = 1


@dataclasses.dataclass(frozen=True)
class RecordingSettings:
    """``--world-recordings`` and its retention (``ServerConfig`` states the defaults)."""

    directory: str
    max_count: int
    max_bytes: int


class Recordings:
    """The recordings directory: new ids, where a recording's files are, and retention."""

    def __init__(self, settings: RecordingSettings) -> None:
        self.settings = settings
        self.root = Path(settings.directory)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--world-recordings {settings.directory}: {exc}") from exc
        self.format: VideoFormat = best_format()
        #: Recordings being written: never deleted by retention.
        self._live: set[str] = set()
        #: Bytes each recording being written holds so far (``holds``), and the finished ones' total.
        self._live_bytes: dict[str, int] = {}
        self._finished_bytes = 0
        self._lock = threading.Lock()

    def new_id(self) -> str:
        return f"rec_{time.time_ns():016x}{secrets.token_hex(4)}"

    def directory(self, recording_id: str) -> Path | None:
        """The recording's directory if ``recording_id`` names one here (never a path outside)."""
        if not ID_PATTERN.fullmatch(recording_id):
            return None
        path = self.root / recording_id
        return path if (path / EVENTS_FILE).is_file() else None

    def video_path(self, recording_id: str) -> Path | None:
        directory = self.directory(recording_id)
        if directory is None:
            return None
        return next((p for p in directory.glob("video.*") if p.is_file()), None)

    def events_path(self, recording_id: str) -> Path | None:
        directory = self.directory(recording_id)
        return None if directory is None else directory / EVENTS_FILE

    def began(self, recording_id: str) -> None:
        with self._lock:
            self._live.add(recording_id)

    def ended(self, recording_id: str) -> None:
        with self._lock:
            self._live.discard(recording_id)
            self._finished_bytes += self._live_bytes.pop(recording_id, 0)

    def holds(self, recording_id: str, written: int) -> bool:
        """Whether a recording being written may hold ``written`` bytes: the directory stays within
        ``max_bytes``, the oldest finished recordings deleted first to make room. Blocking: called
        on its writer thread."""
        with self._lock:
            self._live_bytes[recording_id] = written
            total = self._finished_bytes + sum(self._live_bytes.values())
        if total <= self.settings.max_bytes:
            return True
        self.prune()
        with self._lock:
            return self._finished_bytes + sum(self._live_bytes.values()) <= self.settings.max_bytes

    def prune(self) -> list[str]:
        """Delete the oldest finished recordings until at most ``max_count`` and ``max_bytes``
        remain; returns the ids deleted. Blocking: called on a writer thread."""
        with self._lock:
            found = sorted(p for p in self.root.iterdir() if ID_PATTERN.fullmatch(p.name) and p.is_dir())
            sizes = {p.name: sum(f.stat().st_size for f in p.iterdir() if f.is_file()) for p in found}
            count, total = len(found), sum(sizes.values())
            deleted: list[str] = []
            for path in found:
                if count <= self.settings.max_count and total <= self.settings.max_bytes:
                    break
                if path.name in self._live:
                    continue
                shutil.rmtree(path, ignore_errors=True)
                count, total = count - 1, total - sizes[path.name]
                deleted.append(path.name)
            self._finished_bytes = sum(size for name, size in sizes.items() if name not in self._live) - sum(
                sizes[name] for name in deleted
            )
        if deleted:
            log_event(logger, "world.recordings_pruned", deleted=len(deleted), kept=count, bytes=total)
        return deleted

    def start(
        self,
        header: dict[str, Any],
        width: int,
        height: int,
        fps: float,
        on_failed: Callable[[str, str], None],
    ) -> Recorder:
        """A new recording of one session; its writer thread starts now."""
        recording_id = self.new_id()
        self.began(recording_id)
        directory = self.root / recording_id
        header = {
            "type": "recording.header",
            "version": VERSION,
            "recording_id": recording_id,
            **header,
            "video": {"file": "video" + self.format.suffix, "codec": self.format.codec},
            "started_at": time.time(),
        }
        writer = _Writer(self, directory, header, (width, height, fps))
        recorder = Recorder(recording_id, writer, on_failed)
        writer.start(recorder)
        return recorder


class Recorder:
    """A ``Tap`` (``taps.py``) that hands one session's output to its recording's writer thread."""

    def __init__(self, recording_id: str, writer: _Writer, on_failed: Callable[[str, str], None]) -> None:
        self.recording_id = recording_id
        self._writer = writer
        self._on_failed = on_failed
        self._loop = asyncio.get_running_loop()
        self._started = time.monotonic()
        self.is_ended = False

    def _now_ms(self) -> float:
        return round((time.monotonic() - self._started) * 1000, 3)

    def chunk(self, header: wire.ChunkHeader, frames: Frames, encoded: Sequence[bytes]) -> None:
        line = {**msgspec.to_builtins(header), "t_ms": self._now_ms()}
        self._put(("chunk", line, frames), int(frames.nbytes))

    def event(self, event: dict[str, Any], player: int = 1) -> None:
        line = {"type": "world.event", "t_ms": self._now_ms(), "event": event}
        if player != 1:  # a joined player's (shared worlds): its ids are its own
            line["player"] = player
        self._put(("line", line, None), 1024)

    def reset(self) -> None:
        self._put(("line", {"type": "world.reset", "t_ms": self._now_ms()}, None), 64)

    def closed(self) -> None:
        if not self.is_ended:
            self.is_ended = True
            self._writer.put(("end", {"type": "recording.end", "t_ms": self._now_ms()}, None), 1)

    def _put(self, item: tuple[str, dict[str, Any], Frames | None], size: int) -> None:
        if self.is_ended:
            return
        if not self._writer.put(item, size):
            self.fail(
                "recording_too_slow", "the recording's writer fell behind the session; the recording ended"
            )

    def fail(self, code: str, message: str) -> None:
        """End the recording (not the session) and tell the player; on the event loop."""
        if self.is_ended:
            return
        self.is_ended = True
        self._writer.abort(code, message)
        log_event(logger, "world.recording_failed", logging.WARNING, recording=self.recording_id, code=code)
        self._on_failed(code, message)

    def failed_on_writer(self, code: str, message: str) -> None:
        """The writer thread hit an error: hand it to the loop (which may be gone at shutdown)."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.fail, code, message)


class _Writer:
    """The writer thread of one recording: a bounded queue in, a video and an events log out."""

    def __init__(
        self, store: Recordings, directory: Path, header: dict[str, Any], shape: tuple[int, int, float]
    ) -> None:
        self._store = store
        self._directory = directory
        self._header = header
        self._shape = shape
        self._queue: queue.SimpleQueue[tuple[str, dict[str, Any], Frames | None, int]] = queue.SimpleQueue()
        self._queued_bytes = 0
        self._lock = threading.Lock()
        self._abort: tuple[str, str] | None = None
        self._recorder: Recorder | None = None
        #: The recording's bytes on disk after its last chunk (``_check_size``).
        self._written = 0
        #: Set when the files are closed (for tests and shutdown).
        self.done = threading.Event()

    def start(self, recorder: Recorder) -> None:
        self._recorder = recorder
        name = f"livegen-recording-{self._header['recording_id']}"
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def put(self, item: tuple[str, dict[str, Any], Frames | None], size: int) -> bool:
        """Queue an item; False (nothing queued) if the queue holds ``MAX_QUEUED_BYTES`` already."""
        with self._lock:
            if self._queued_bytes + size > MAX_QUEUED_BYTES:
                return False
            self._queued_bytes += size
        self._queue.put((*item, size))
        return True

    def abort(self, code: str, message: str) -> None:
        self._abort = (code, message)
        self._queue.put(("abort", {}, None, 0))

    def _run(self) -> None:
        recorder = self._recorder
        assert recorder is not None
        try:
            self._write_all()
        except Exception as exc:  # a full or failing disk, an encoder's error: the recording ends
            if not isinstance(exc, OSError | RecordingLimit):  # a bug or the encoder: a traceback
                logger.error("world.recording_crashed", exc_info=exc)
            recorder.failed_on_writer(*(self._abort or _failure(exc)))
        finally:
            self._store.ended(str(self._header["recording_id"]))
            self.done.set()
            with contextlib.suppress(OSError):
                self._store.prune()

    def _write_all(self) -> None:
        self._directory.mkdir(parents=True)
        width, height, fps = self._shape
        video_name = str(self._header["video"]["file"])
        with (self._directory / EVENTS_FILE).open("w", encoding="utf-8") as log:
            _write_line(log, self._header)
            self._store.prune()
            video = VideoWriter(self._directory / video_name, width, height, fps, self._store.format)
            end: dict[str, Any] | None = None
            try:
                end = self._drain(log, video)
            except Exception as exc:
                self._abort = self._abort or _failure(exc)
                raise
            finally:
                with contextlib.suppress(Exception):  # a failing disk may fail the flush too
                    video.close()
                if end is not None:  # last, once the video is whole: a reader who sees it may read both
                    _write_line(log, end)
                if self._abort is not None:
                    with contextlib.suppress(OSError):
                        code, message = self._abort
                        _write_line(log, {"type": "recording.failed", "code": code, "message": message})

    def _drain(self, log: Any, video: VideoWriter) -> dict[str, Any] | None:
        """Write the queue's items until its end, whose line is returned unwritten (None: aborted)."""
        while self._abort is None:
            kind, line, frames, size = self._queue.get()
            if kind == "abort":
                return None
            if kind == "end":
                with self._lock:
                    self._queued_bytes -= size
                return line
            if frames is not None:
                line["video_frame"] = video.num_frames
                line["frame_sha256"] = [hashlib.sha256(frame.tobytes()).hexdigest() for frame in frames]
                write_frames(video, frames)
            _write_line(log, line)
            if frames is not None:
                self._check_size(log, video)
            with self._lock:
                self._queued_bytes -= size
        return None

    def _check_size(self, log: Any, video: VideoWriter) -> None:
        """Raise ``RecordingLimit`` when this recording would not fit the directory's
        ``max_bytes`` (``Recordings.holds``) with its next chunk (as large as the last) and
        ``LIMIT_MARGIN`` of it for what the encoder and the container still hold (frames in the
        encoder's lookahead, each fragment's boxes): it ends before it crosses the limit, so that
        retention keeps what it wrote. Its size: the log's, and the video encoded so far."""
        written = log.tell() + video.encoded_bytes
        growth, self._written = written - self._written, written
        margin = int(self._store.settings.max_bytes * LIMIT_MARGIN)
        if not self._store.holds(str(self._header["recording_id"]), written + growth + margin):
            limit = self._store.settings.max_bytes
            raise RecordingLimit(f"the recordings reached their limit of {limit} bytes; the recording ended")


class RecordingLimit(Exception):
    """A recording being written would take the recordings past ``max_bytes``."""

    code = "recording_limit_reached"


def _failure(exc: Exception) -> tuple[str, str]:
    """The code and message of a writer's error, as ``recording.failed`` carries them."""
    if isinstance(exc, RecordingLimit):
        return exc.code, str(exc)
    if isinstance(exc, OSError):  # a full or failing disk
        return "recording_write_failed", f"writing the recording failed: {exc}"
    return "recording_failed", f"the recording failed: {type(exc).__name__}: {exc}"


def write_frames(video: VideoWriter, frames: Frames) -> None:
    """One chunk's frames into the video (a seam: tests make it fail as a full disk would)."""
    video.write(frames)


def _write_line(log: Any, line: dict[str, Any]) -> None:
    log.write(json.dumps(line, separators=(",", ":")) + "\n")
    log.flush()


__all__ = ["EVENTS_FILE", "MAX_QUEUED_BYTES", "Recorder", "RecordingSettings", "Recordings"]

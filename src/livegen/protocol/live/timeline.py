"""The output side of a GPT-Live session's timeline: audio at real-time pace, silence included.

A GPT-Live server streams its output audio without a break, frame after
frame, silent frames between utterances (LiveKit publishes every frame and
ends a reply after 0.8 s of quiet *on the stream*; pipecat ends a turn 0.8 s
after the last transcript piece), and places each output transcript piece on
that stream by ``start_ms``/``end_ms``. A voice session speaks in bursts, as
fast as it makes speech; this timeline turns the bursts into that stream: the
speech queued, in order, with the transcript pieces at the audio position they
arrived at, and ``frames(until_ms)`` the frames from the last one sent up to a
moment the transport's clock gives (silence where nothing is queued). A
barge-in (``clear``) drops what was not sent yet: nothing of an old turn
plays after it.

Sans-IO: the transport owns the clock and calls ``frames`` on its ticks.
"""

from __future__ import annotations

import base64
from collections import deque
from dataclasses import dataclass, field

from livegen.protocol.live import events as live

#: One output frame: short enough to start speech soon after it is made, long enough to keep
#: the event rate low (25 frames a second per session).
FRAME_MS = 40
#: The end of a response, in the queue (``OutputTimeline.end_response``).
_END = b""
#: The transport falls this far behind (a late event loop) before it skips silence to catch up.
MAX_LAG_MS = 400


@dataclass
class OutputTimeline:
    """Queued speech and transcript pieces, sent as a gapless stream of frames."""

    bytes_per_ms: int
    frame_ms: int = FRAME_MS
    #: Where the next frame starts on the session's timeline (ms).
    position_ms: int = 0
    _queue: deque[bytes | str] = field(default_factory=deque)
    _silence: str = ""
    _event_ids: int = 0

    def __post_init__(self) -> None:
        self._silence = base64.b64encode(bytes(self.frame_bytes)).decode()

    @property
    def frame_bytes(self) -> int:
        return self.frame_ms * self.bytes_per_ms

    @property
    def queued_ms(self) -> int:
        return sum(len(piece) for piece in self._queue if isinstance(piece, bytes)) // self.bytes_per_ms

    def push_audio(self, pcm: bytes) -> None:
        if pcm:
            self._queue.append(pcm)

    def push_text(self, text: str) -> None:
        if text:
            self._queue.append(text)

    def end_response(self) -> None:
        """A response is over: its last transcript pieces may go out with no speech after them."""
        self._queue.append(_END)

    def clear(self) -> int:
        """Drop what is queued (a barge-in, or the session's end); the ms of speech dropped."""
        dropped = self.queued_ms
        self._queue.clear()
        return dropped

    def frames(self, until_ms: int) -> list[live.OutputAudioDelta | live.OutputTranscriptDelta]:
        """The frames (and the transcript pieces they begin) that start before ``until_ms`` (a frame
        earlier for silence)."""
        if not self.queued_ms and until_ms - self.position_ms > MAX_LAG_MS:
            self.position_ms = until_ms - self.frame_ms  # silence is not owed: catch up
        out: list[live.OutputAudioDelta | live.OutputTranscriptDelta] = []
        # Silence goes out a frame later than speech may: the frame after a silence is still
        # unsent when speech arrives, so speech leaves at once rather than a frame late.
        while self.position_ms < (until_ms if self.queued_ms else until_ms - self.frame_ms):
            out += self._frame()
        return out

    def _frame(self) -> list[live.OutputAudioDelta | live.OutputTranscriptDelta]:
        start, end = self.position_ms, self.position_ms + self.frame_ms
        self.position_ms = end
        if not self._queue or (isinstance(self._queue[0], str) and not self._said_next()):
            return [live.OutputAudioDelta(delta=self._silence, start_ms=start, end_ms=end)]
        out: list[live.OutputAudioDelta | live.OutputTranscriptDelta] = []
        pcm = bytearray()
        while self._queue and len(pcm) < self.frame_bytes:
            if isinstance(self._queue[0], str) and not self._said_next():
                break  # a piece waits for its speech (the transcript is made before the audio)
            piece = self._queue.popleft()
            if piece is _END:
                continue
            if isinstance(piece, str):
                at = start + len(pcm) // self.bytes_per_ms
                out.append(self._transcript(piece, at))
                continue
            room = self.frame_bytes - len(pcm)
            pcm += piece[:room]
            if len(piece) > room:
                self._queue.appendleft(piece[room:])
        pcm += bytes(self.frame_bytes - len(pcm))
        out.insert(0, live.OutputAudioDelta(delta=base64.b64encode(pcm).decode(), start_ms=start, end_ms=end))
        return out

    def _said_next(self) -> bool:
        """Whether speech (or the response's end) follows the transcript piece at the head."""
        return any(not isinstance(piece, str) for piece in self._queue)

    def _transcript(self, text: str, at: int) -> live.OutputTranscriptDelta:
        """A piece placed where its speech starts; it lasts until the next piece's (or the end of
        what is queued)."""
        length = 0
        for piece in self._queue:
            if isinstance(piece, str) or piece is _END:
                break
            length += len(piece)
        self._event_ids += 1
        event_id = f"event_live_out_{self._event_ids:06d}"
        end = at + length // self.bytes_per_ms
        return live.OutputTranscriptDelta(event_id=event_id, delta=text, start_ms=at, end_ms=max(at, end))

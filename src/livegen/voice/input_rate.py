"""A voice session's input rate bound: audio may arrive faster than real time, within limits.

A client that streams speech sends about one second of audio per second; one
that uploads a recording sends faster, in a burst. Every second of input costs
CPU (decoding, resampling, the model's detector), so a session takes input at
up to ``factor`` times real time, with a burst of ``burst_ms`` of audio at once
(a token bucket counted in audio milliseconds). An append beyond that is
refused before it is decoded (``rate_limit_exceeded``, OpenAI's code for a rate
limit) and nothing of it is kept: the client slows down and resends it.

Pure: the caller passes the clock.
"""

from __future__ import annotations

from livegen.protocol.errors import RATE_LIMIT_EXCEEDED


class InputRate:
    def __init__(self, factor: float, burst_ms: float) -> None:
        self.factor = factor
        self.burst_ms = burst_ms
        self.available_ms = burst_ms
        self._updated: float | None = None

    def _refill(self, now: float) -> None:
        if self._updated is not None and now > self._updated:
            gained = (now - self._updated) * 1000.0 * self.factor
            self.available_ms = min(self.burst_ms, self.available_ms + gained)
        self._updated = now if self._updated is None else max(self._updated, now)

    def check(self, audio_ms: float, now: float) -> None:
        """Raise ``rate_limit_exceeded`` if ``audio_ms`` more would pass the bound (nothing spent)."""
        self._refill(now)
        if audio_ms > self.available_ms:
            detail = (
                f"input audio arrives faster than this session takes it: this append holds "
                f"{audio_ms:.0f} ms of audio and {self.available_ms:.0f} ms may come now (up to "
                f"{self.factor:g}x real time, bursts up to {self.burst_ms / 1000:g} s); "
                "send smaller appends, or slow down and resend this one"
            )
            raise RATE_LIMIT_EXCEEDED.error(detail=detail)

    def spend(self, audio_ms: float) -> None:
        self.available_ms -= audio_ms

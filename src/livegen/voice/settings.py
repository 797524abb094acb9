"""The fixed facts of a voice session: its limits, its model's rates, its id factory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: Makes a fresh id with the given prefix ("event", "item", "resp"); injected, so the core stays pure.
IdFactory = Callable[[str], str]


@dataclass(frozen=True)
class Limits:
    #: Input bytes (PCM16 at the model rate) accepted but not yet taken by the model.
    max_input_bytes: int = 8 * 1024 * 1024
    #: Commits waiting in the chain.
    max_pending_commits: int = 4
    #: Audio is released to the client at most this far ahead of real-time playback.
    lead_ms: float = 200.0
    #: Audio a response may hold back for pacing; more fails that response.
    max_buffered_output_ms: float = 120_000.0
    #: Input audio is taken at up to this many times real time (``voice/input_rate.py``) ...
    input_rate_factor: float = 10.0
    #: ... with bursts of up to this much audio at once (a larger single append is refused).
    input_burst_ms: float = 60_000.0
    #: Hosts (``host`` or ``host:port``) a session's MCP ``server_url`` may reach
    #: (``--mcp-allowed-hosts``); none by default, since the client picks the URL.
    mcp_allowed_hosts: tuple[str, ...] = ()
    #: Seconds one MCP request of the model may take (``--mcp-timeout``).
    mcp_timeout_s: float = 30.0


#: OpenAI's Realtime voices, as its ``invalid_value`` lists them.
REALTIME_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar")


@dataclass(frozen=True)
class ModelFacts:
    name: str
    input_rate: int
    output_rate: int
    has_vad: bool
    #: Whether the model can speak with a voice of that name (a pure lookup, injected); None: any.
    accepts_voice: Callable[[str], bool] | None = None
    #: The transcription model names a session may give, the model's recognisers first (a pure
    #: lookup, injected); None: any (a remote recogniser hears, or the model does not say).
    transcription_models: tuple[str, ...] | None = None
    #: A native duplex (lockstep) model's frame period in ms; 0 for a model that answers when asked.
    frame_ms: float = 0.0

    @property
    def is_duplex(self) -> bool:
        return self.frame_ms > 0

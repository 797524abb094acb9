"""What the voice runtime knows of a session's lifecycle: its links, handoffs and live state.

A voice session is *live* on one client link, *parked* when that link is lost
(for ``--resume-grace``, waiting for ``session.resume``), and live again on the
resuming link, or *ended*. The steps are one table (``voice/lifecycle.py``),
which the session's owner (``owner.SessionOwner``) runs; this module holds the
values they pass around, with no transport in them:

- ``Link``: one client connection as the engine sees it (a WebSocket, or a
  WebRTC call's data channel): send a text event, close with a code, receive
  the next message (text, or an event the transport decoded itself: a call's
  audio); a link may say why it ended (``end_reason``, the ``session.closed``
  reason);
- ``Handoff``: a link posted to the session's owner (the opening one, or a
  resuming one), with the event its transport handler waits on until the
  owner is done with it (an ASGI handler that returns closes its socket);
- ``LiveSession``: what a live session exposes to resuming links: its runner,
  attachment (journal), single-use resume token, handoff queue and dialect.

Tokens are random, compared in constant time, single-use (a resume claims the
token before it posts its handoff: of two concurrent resumes with one token,
one wins) and rotated on every resume, so a token that leaked from an old
connection cannot take the session again (``attachment.ResumeCredential``).
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field
from typing import Protocol

from livegen.errors import RemoteProtocolError
from livegen.models.voice import VoiceModel
from livegen.protocol import realtime as wire
from livegen.protocol.realtime import server as ev
from livegen.protocol.realtime.duplex import DuplexDialect
from livegen.runtime.voice.attachment import Attachment, ResumeCredential
from livegen.runtime.voice.runner import Dialect, Runner


class Link(Protocol):
    """One client connection as the engine sees it; the transport decodes its frames."""

    async def send_text(self, text: str) -> None: ...

    async def close(self, code: int) -> None: ...

    async def receive(self) -> str | wire.ClientEvent | RemoteProtocolError | int:
        """The next text message (or event the transport decoded), the error for one it could
        not decode, or the close code."""
        ...


@dataclass
class Handoff:
    """A client link posted to the session's owner: the opening one, or a resuming one."""

    link: Link
    last_seq: int = 0
    event_id: str | None = None
    #: A duplex client (``protocol/realtime/duplex.py``): its greeting and refusals are vllm-omni's.
    duplex: bool = False
    #: Set by the owner when it is done with the link (the transport's handler may then return).
    released: asyncio.Event = field(default_factory=asyncio.Event)
    #: The link's last word on each outgoing event while it is attached (a WebRTC call's answer
    #: audio goes to its track, not the channel); None: events go out as the session's dialect
    #: makes them (and so they are journaled while the session is parked).
    transport: Dialect | None = None
    #: The link carries the default audio formats only (a WebRTC call's track, PCM16 at 24 kHz):
    #: while it is attached, a ``session.update`` may not change them (``Config.formats_fixed``),
    #: and it may resume only a session in those formats.
    formats_fixed: bool = False


@dataclass
class LiveSession:
    """What a live voice session exposes to resuming links."""

    runner: Runner
    attachment: Attachment
    credential: ResumeCredential = field(default_factory=ResumeCredential)
    handoffs: asyncio.Queue[Handoff] = field(default_factory=asyncio.Queue)
    #: The duplex dialect's state when the session was opened by a duplex client (a resume keeps it).
    duplex: DuplexDialect | None = None
    #: Set to end a parked session early (the parked budget needs its room).
    evicted: asyncio.Event = field(default_factory=asyncio.Event)
    #: The link the session is attached to; None while it is parked (or has ended).
    attached: Handoff | None = None

    def held_bytes(self) -> int:
        """What the session holds while parked: its journal and its history (text)."""
        return self.attachment.journal_bytes + self.runner.session.conversation.chars()


@dataclass(frozen=True)
class Opening:
    """A new session, admitted: the link that opened it and how it talks."""

    handoff: Handoff
    session_id: str
    model_name: str
    model: VoiceModel
    #: ``transcription`` for ``?intent=transcription``, else ``realtime``.
    session_type: str = "realtime"
    #: The beta dialect's names (``OpenAI-Beta: realtime=v1``).
    beta: bool = False
    #: A duplex client's first message (``session.update``), delivered once the session runs.
    first: str | None = None
    #: The configuration the client's ephemeral key was made with, applied first.
    bound: wire.ClientEvent | None = None
    #: Told when the session has started (None) or was refused (the error), for a transport that
    #: answers before the session's first event (a call's HTTP answer).
    outcome: asyncio.Future[RemoteProtocolError | None] | None = None

    @property
    def formats_fixed(self) -> bool:
        """The opening link carries the default audio formats only (``Handoff.formats_fixed``)."""
        return self.handoff.formats_fixed


def resumed_event(session_id: str, token: str, last_seq: int, seq: int) -> str:
    """The greeting on the new link, before the replay (not itself numbered in the stream)."""
    greeting = ev.SessionResumed(
        event_id="event_resumed_" + secrets.token_hex(4),
        session_id=session_id,
        resume_token=token,
        last_event_seq=last_seq,
        replay_from_seq=last_seq + 1,
        latest_seq=seq,
    )
    return wire.encode(greeting).decode()

"""A translation session's link: the client's connection seen through the translation dialect.

The transport (``server/realtime/translation.py``) wraps its plain link in a
``TranslationLink`` and hands it to the engine as any session's opening link;
every event in and out passes through ``voice/translation.py``'s dialect, so
the engine runs an ordinary voice session that translates. The link also
keeps ``session.close``'s promise: what is being translated is spoken first
(up to ``CLOSE_FLUSH_S``), then ``session.closed``, then the link ends cleanly.
The translation protocol has no resume, so a lost socket ends the session too
(it is never parked).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from livegen.errors import RemoteProtocolError
from livegen.protocol import realtime as wire
from livegen.runtime.voice.lifecycle import Link
from livegen.voice.translation import TranslationConfig, TranslationDialect

#: How long ``session.close`` waits for the translations under way to be spoken before closing.
CLOSE_FLUSH_S = 30.0


class TranslationLink:
    """``inner`` (a ``Link``) speaking the translation dialect; its own ``session.update`` goes first."""

    def __init__(self, inner: Link, dialect: TranslationDialect) -> None:
        self.inner = inner
        self.dialect = dialect
        self._pending = [dialect.opening()]
        #: Set while no translation is under way (``session.close`` waits for it).
        self._idle = asyncio.Event()
        self._idle.set()

    async def send_text(self, text: str) -> None:
        for event in self.dialect.outbound(text):
            await self.inner.send_text(json.dumps(event))
        if self.dialect.responses:
            self._idle.clear()
        else:
            self._idle.set()

    async def close(self, code: int) -> None:
        await self.inner.close(code)

    async def receive(self) -> str | wire.ClientEvent | RemoteProtocolError | int:
        if self._pending:
            return self._pending.pop(0)
        message = await self.inner.receive()
        if isinstance(message, int):
            return 1000  # the protocol has no resume: a lost socket ends the session, never parks it
        if not isinstance(message, str):
            return message
        try:
            event = self.dialect.inbound(message)
        except RemoteProtocolError as error:
            return error
        if event is not None:
            return event
        with contextlib.suppress(TimeoutError):  # session.close: what is under way is spoken first
            async with asyncio.timeout(CLOSE_FLUSH_S):
                await self._idle.wait()
        for closed in self.dialect.closing(""):
            await self.inner.send_text(json.dumps(closed))
        return 1000


def translation_link(
    inner: Link, session_id: str, model: str, bound: dict[str, Any] | None
) -> TranslationLink:
    """A new translation session's link, configured first as its key was minted (``bound``)."""
    config = TranslationConfig()
    if bound is not None and bound.get("type") == "translation":
        config.apply(bound)
    return TranslationLink(inner, TranslationDialect(session_id, model, config))


def minted_session(session: object, expires_at: int) -> dict[str, Any]:
    """A translation key's ``session`` checked (OpenAI's errors if not), as the mint answer shows it."""
    assert isinstance(session, dict)
    config = TranslationConfig()
    config.apply(session)
    return TranslationDialect("sess_ephemeral", str(session["model"]), config, expires_at).session()

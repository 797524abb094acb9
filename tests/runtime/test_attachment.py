"""The attachment: numbered events, a bounded journal, gapless replay, a failed write detaches."""

from __future__ import annotations

import pytest

from livegen.runtime.attachment import Attachment, JournalGap


class Socket:
    def __init__(self, fail_after: int | None = None) -> None:
        self.got: list[str] = []
        self.fail_after = fail_after

    async def send(self, text: str) -> None:
        if self.fail_after is not None and len(self.got) >= self.fail_after:
            raise ConnectionError("gone")
        self.got.append(text)


async def test_events_are_numbered_and_replayed_after_the_clients_last_seq() -> None:
    first = Socket(fail_after=2)
    attachment = Attachment(first.send)
    for i in range(1, 6):
        await attachment.send(f"e{i}")
    assert first.got == ["e1", "e2"] and not attachment.is_attached and attachment.seq == 5
    second = Socket()
    replayed = await attachment.attach(second.send, last_seq=2, greeting="hi")
    await attachment.send("e6")
    assert replayed == 3 and second.got == ["hi", "e3", "e4", "e5", "e6"]


async def test_a_journal_that_no_longer_reaches_back_refuses_and_sends_nothing() -> None:
    attachment = Attachment(None, journal_bytes=6)
    for i in range(1, 6):
        await attachment.send(f"e{i}")  # 2 bytes each: e3..e5 kept
    socket = Socket()
    with pytest.raises(JournalGap):
        await attachment.attach(socket.send, last_seq=1, greeting="hi")
    assert socket.got == [] and not attachment.is_attached
    with pytest.raises(ValueError, match="outside"):
        await attachment.attach(socket.send, last_seq=6, greeting="hi")
    assert await attachment.attach(socket.send, last_seq=2, greeting="hi") == 3
    assert socket.got == ["hi", "e3", "e4", "e5"]

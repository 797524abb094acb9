"""The attachment: numbered events, a bounded journal, gapless replay, a failed write detaches."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from livegen.runtime.voice.attachment import Attachment, JournalGap, ResumeCredential


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


class AttachmentMachine(RuleBasedStateMachine):
    """Random sends, drops, acks and resumes (with the right or a stale token, some racing):
    a token takes the session once; every attached socket gets each event at most once, in order,
    and a replay hands over exactly the events after the client's seq."""

    def __init__(self) -> None:
        super().__init__()
        self.attachment = Attachment(None, journal_bytes=12, stamp_seq=False)
        self.credential = ResumeCredential()
        self.tokens: list[str] = [str(self.credential.token)]
        self.socket = Socket()
        self.acked = 0
        self.loop = asyncio.new_event_loop()

    def teardown(self) -> None:
        self.loop.close()

    @rule()
    def send(self) -> None:
        self.loop.run_until_complete(self.attachment.send(f"e{self.attachment.seq + 1}"))

    @rule()
    def drop(self) -> None:
        self.attachment.detach()

    @rule(seq=st.integers(0, 40))
    def ack(self, seq: int) -> None:
        if seq > self.attachment.seq:
            with pytest.raises(ValueError):
                self.attachment.acknowledge(seq)
        else:
            self.attachment.acknowledge(seq)
            self.acked = max(self.acked, seq)

    @rule(stale=st.booleans(), racers=st.integers(1, 3), fails=st.booleans())
    def resume(self, stale: bool, racers: int, fails: bool) -> None:
        token = self.tokens[0] if stale and len(self.tokens) > 1 else self.tokens[-1]
        wins = [self.credential.claim(token) for _ in range(racers)]
        assert wins.count(True) <= 1  # single use, however many race
        if not any(wins):
            assert token != self.credential.token or stale
            return
        if fails:  # the take-over failed: the token is good again, for one more claim
            self.credential.give_back()
            assert self.credential.token == token
            return
        new = f"t{len(self.tokens)}"
        self.credential.settle(new)
        self.tokens.append(new)
        last = self.attachment.seq
        socket = Socket()
        self.loop.run_until_complete(self.attachment.attach(socket.send, last, "hi"))
        assert socket.got == ["hi"]
        self.socket = socket

    @invariant()
    def journal_holds_what_was_not_acked(self) -> None:
        assert self.attachment.oldest_seq > self.acked  # acked events are forgotten
        sent = [int(text[1:]) for text in self.socket.got[1:]]
        assert sent == sorted(set(sent))


TestAttachmentMachine = AttachmentMachine.TestCase

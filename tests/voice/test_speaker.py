"""The speaker alone: a response's events, pacing and its one terminal, with no session around it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest

from livegen.errors import RemoteProtocolError
from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol.audio import AudioFormat, OutputEncoder
from livegen.protocol.realtime.session import format_object
from livegen.voice.attempts import Attempts
from livegen.voice.calls import CallLedger
from livegen.voice.chain import DropOutput, Effect, Send
from livegen.voice.config import Config
from livegen.voice.conversation import Conversation
from livegen.voice.output import Speaker
from livegen.voice.response import Response
from livegen.voice.settings import Limits, ModelFacts

RATE = 24_000


@dataclass
class Owner:
    """What a speaker reads of its session (``output.Owner``); no interruption happens here."""

    config: Config = field(default_factory=lambda: Config(model="m"))
    model: ModelFacts = field(default_factory=lambda: ModelFacts("m", RATE, RATE, False))
    epoch: int = 0

    def interrupt(self, now: float, reason: str) -> list[Effect]:
        raise AssertionError("the speaker alone never advances the fence in these tests")


def new_speaker(lead_ms: float = 0.0) -> tuple[Speaker, list[tuple[str, float]]]:
    counter = itertools.count()
    finished: list[tuple[str, float]] = []
    speaker = Speaker(
        Owner(),
        Attempts(),
        lambda p: f"{p}_{next(counter)}",
        Limits(lead_ms=lead_ms),
        Conversation(),
        CallLedger(),
        lambda response, now: finished.append((response.id, now)),
    )
    return speaker, finished


def new_response(modalities: tuple[str, ...] = ("audio",)) -> Response:
    fmt = AudioFormat()
    return Response(
        id="resp_1",
        epoch=0,
        modalities=modalities,
        voice="alloy",
        output_format=format_object(fmt),
        encoder=OutputEncoder(fmt, RATE),
    )


def types(effects: list[Any]) -> list[str]:
    return [e.type for e in effects if isinstance(e, Send)]


def out(kind: OutputKind, **fields: Any) -> VoiceOutput:
    return VoiceOutput(kind, 0, "resp_1", **fields)


def test_a_text_response_ends_once_and_tells_its_owner() -> None:
    speaker, finished = new_speaker()
    response = new_response(("text",))
    assert speaker.begin(response).type == "response.created"
    effects = speaker.on_output(response, out(OutputKind.TEXT_DELTA, text="hi"), 0.0)
    assert types(effects) == [
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    effects = speaker.on_output(response, out(OutputKind.RESPONSE_DONE, status="completed"), 1.0)
    assert types(effects)[-1] == "response.done" and speaker.response is None
    assert finished == [("resp_1", 1.0)]
    assert speaker.end(2.0, "cancelled", None) == []  # no second terminal
    assert finished == [("resp_1", 1.0)]


def test_audio_is_held_to_real_time_plus_the_lead() -> None:
    speaker, _ = new_speaker(lead_ms=0.0)
    response = new_response()
    speaker.begin(response)
    second = bytes(RATE * 2)
    effects = speaker.on_output(response, out(OutputKind.AUDIO_DELTA, audio=second), 10.0)
    effects += speaker.on_output(response, out(OutputKind.AUDIO_DELTA, audio=second), 10.0)
    assert types(effects).count("response.output_audio.delta") == 1
    assert speaker.next_deadline() == 12.0
    assert speaker.is_speaking(10.5)
    assert types(speaker.tick(12.0)).count("response.output_audio.delta") == 1


def test_a_cut_answer_is_truncated_to_what_was_heard_and_its_audio_dropped() -> None:
    speaker, _ = new_speaker(lead_ms=0.0)
    response = new_response()
    speaker.begin(response)
    speaker.on_output(response, out(OutputKind.TEXT_DELTA, text="aaaa bbbb "), 0.0)
    speaker.on_output(response, out(OutputKind.AUDIO_DELTA, audio=bytes(RATE * 2)), 0.0)
    effects = speaker.end(0.5, "cancelled", {"type": "cancelled"})
    assert DropOutput("resp_1") in effects
    truncated = [
        e.as_dict() for e in effects if isinstance(e, Send) and e.type == "conversation.item.truncated"
    ]
    assert truncated[0]["audio_end_ms"] == 500
    item = speaker.conversation.items()[0]
    assert item.status == "incomplete" and item.text == "aaaa "


def test_a_caption_without_an_item_belongs_to_the_turn_being_spoken() -> None:
    speaker, _ = new_speaker()
    caption = VoiceOutput(OutputKind.TRANSCRIPT_DELTA, 0, text="hel")
    assert speaker.on_transcript(caption, None) == []
    effects = speaker.on_transcript(caption, "item_7")
    assert [e.as_dict()["item_id"] for e in effects if isinstance(e, Send)] == ["item_7"]


def test_an_ack_names_a_known_answer() -> None:
    speaker, _ = new_speaker()
    response = new_response()
    speaker.begin(response)
    speaker.on_output(response, out(OutputKind.AUDIO_DELTA, audio=bytes(RATE * 2)), 0.0)
    speaker.heard.ack("resp_1", None, 300)
    playback = next(iter(speaker.playbacks.values()))
    assert playback.played_ms == 300
    with pytest.raises(RemoteProtocolError):
        speaker.heard.ack("resp_other", None, 10)
    with pytest.raises(RemoteProtocolError):
        speaker.heard.ack("resp_1", None, -1)

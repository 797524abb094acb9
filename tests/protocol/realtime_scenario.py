"""A scripted walk through every server event kind the voice core sends, for the golden test.

``test_server_events_golden.py`` replays it and compares each encoded event,
GA and beta, with what livegen sent before the server events were typed
(``data/realtime_events.jsonl``, recorded from the dict-building core). Run
this module to re-record (only when a wire change is intended).
"""

from __future__ import annotations

import base64
import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from livegen.models.voice import OutputKind, Usage, VoiceOutput
from livegen.protocol import realtime as wire
from livegen.protocol.realtime import beta
from livegen.voice.chain import Send
from livegen.voice.session import Limits, ModelFacts, Session
from voice.drive import drive

GOLDEN = Path(__file__).parent / "data" / "realtime_events.jsonl"
RATE = 8_000
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _session(has_vad: bool, session_type: str = "realtime") -> Session:
    counter = itertools.count()
    facts = ModelFacts("m", RATE, RATE, has_vad)
    return Session("s", facts, lambda p: f"{p}_{next(counter)}", Limits(lead_ms=0), session_type=session_type)


def _pcm(ms: int, loud: bool) -> str:
    sample = b"\x00\x40" if loud else b"\x00\x00"
    return base64.b64encode(sample * (RATE * ms // 1000)).decode()


def _out(session: Session, kind: OutputKind, **fields: Any) -> VoiceOutput:
    response = session.response
    rid = fields.pop("response_id", None if response is None else response.id)
    return VoiceOutput(kind, session.epoch, rid, **fields)


def _answer(s: Session, now: float, text: str, audio_ms: int) -> list[Any]:
    effects = drive(s.on_output, _out(s, OutputKind.TEXT_DELTA, text=text), now)
    for _ in range(audio_ms // 100):
        effects += drive(s.on_output, _out(s, OutputKind.AUDIO_DELTA, audio=bytes(RATE * 2 // 10)), now)
    return effects


def _manual(s: Session) -> list[Any]:
    """Manual turns, G.711 out, tools: items, text and audio answers, a call, a truncation."""
    fmt = {"type": "audio/pcm", "rate": RATE}
    update = {
        "instructions": "be brief",
        "tools": [WEATHER],
        "audio": {
            "input": {
                "format": fmt,
                "turn_detection": None,
                "transcription": {"model": "w", "language": "en"},
            },
            "output": {"format": {"type": "audio/pcmu"}, "voice": "verse"},
        },
    }
    e = drive(s.open, 0.0) + drive(s.receive, wire.session_update(update), 0.0)
    e += drive(s.receive, wire.AudioAppend(audio=_pcm(300, True)), 0.1)
    e += drive(s.receive, wire.AudioCommit(), 0.2)
    user = next(x.attempt.item_id for x in e if hasattr(x, "attempt") and x.attempt.item_id)
    e += drive(
        s.on_output, VoiceOutput(OutputKind.TRANSCRIPT_DONE, s.epoch, None, item_id=user, text="hi"), 0.3
    )
    e += drive(s.receive, wire.AudioAppend(audio=_pcm(100, False)), 0.3)
    e += drive(s.receive, wire.AudioClear(), 0.3)
    text = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}
    e += drive(s.receive, wire.ItemCreate(item=text), 0.4)
    e += drive(s.receive, wire.ItemRetrieve(item_id=user), 0.4)
    e += drive(
        s.receive, wire.ResponseCreate(response={"output_modalities": ["text"], "metadata": {"k": "v"}}), 0.5
    )
    e += drive(s.on_output, _out(s, OutputKind.TEXT_DELTA, text="Sure."), 0.6)
    call = _out(s, OutputKind.FUNCTION_CALL, text='{"city": "Paris"}', call_id="c1", name="get_weather")
    e += drive(s.on_output, call, 0.6)
    e += drive(s.on_output, _out(s, OutputKind.RESPONSE_DONE, status="completed", usage=Usage(5, 7, 1)), 0.7)
    output = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
    e += drive(s.receive, wire.ItemCreate(item=output), 0.8)
    e += drive(s.receive, wire.ResponseCreate(), 1.0)
    e += _answer(s, 1.0, "It is sunny in Paris.", 1000)
    e += drive(
        s.on_output, _out(s, OutputKind.RESPONSE_DONE, status="incomplete", code="max_output_tokens"), 1.0
    )
    e += drive(s.tick, 3.0)
    answer = list(s.playbacks)[-1]
    e += drive(s.receive, wire.ItemTruncate(item_id=answer, audio_end_ms=400), 3.0)
    e += drive(s.receive, wire.ItemDelete(item_id=answer), 3.0)
    e += drive(s.receive, wire.ResponseCreate(), 3.1)
    e += _answer(s, 3.1, "And", 300)
    e += drive(s.receive, wire.OutputAudioClear(), 3.15)
    e += drive(s.receive, wire.ResponseCreate(), 3.2)
    e += drive(s.on_output, _out(s, OutputKind.LISTEN, text=""), 3.2)
    e += drive(s.receive, wire.ResponseCreate(), 3.3)
    e += drive(s.on_output, _out(s, OutputKind.ERROR, text="boom"), 3.3)
    e += drive(s.on_output, _out(s, OutputKind.ERROR, text="late", response_id=None), 3.3)
    e += drive(s.receive, wire.ResponseCreate(), 3.4)
    e += drive(s.receive, wire.ResponseCancel(), 3.4)
    e += drive(s.reject, _refusal())
    return e + drive(s.close, 4.0)


def _refusal() -> Any:
    try:
        wire.decode('{"type": "nope", "event_id": "evt_2"}')
    except Exception as error:
        return error
    raise AssertionError("an unknown event type was taken")


def _server_vad(s: Session) -> list[Any]:
    """The fallback detector: speech edges, a barge-in, captions and the idle timeout."""
    vad = {"type": "server_vad", "idle_timeout_ms": 1000, "silence_duration_ms": 200}
    update = {"audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE}, "turn_detection": vad}}}
    e = drive(s.open, 0.0) + drive(s.receive, wire.session_update(update), 0.0)
    e += drive(s.receive, wire.AudioAppend(audio=_pcm(400, True)), 0.1)
    e += drive(s.on_output, VoiceOutput(OutputKind.TRANSCRIPT_DELTA, s.epoch, None, text="What"), 0.2)
    e += drive(s.receive, wire.AudioAppend(audio=_pcm(400, False)), 0.5)
    e += _answer(s, 0.6, "Hi there.", 600)
    e += drive(s.receive, wire.AudioAppend(audio=_pcm(400, True)), 0.8)
    e += drive(s.receive, wire.AudioAppend(audio=_pcm(400, False)), 1.2)
    e += drive(s.on_output, _out(s, OutputKind.RESPONSE_DONE, status="completed"), 1.3)
    e += drive(s.tick, 5.0)
    semantic = {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}}}}
    e += drive(s.receive, wire.session_update(semantic), 6.0)
    return e + drive(s.close, 7.0, "server_shutdown")


def _transcription(s: Session) -> list[Any]:
    update = {"type": "transcription", "audio": {"input": {"transcription": {"model": "w", "prompt": "p"}}}}
    return drive(s.open, 0.0) + drive(s.receive, wire.session_update(update), 0.0) + drive(s.close, 1.0)


def events() -> Iterator[tuple[str, bytes, bytes]]:
    """(type, GA bytes, beta bytes) of every event the scenarios send, in order."""
    scenarios = [
        _manual(_session(False)),
        _server_vad(_session(False)),
        _transcription(_session(True, "transcription")),
    ]
    for effects in scenarios:
        for effect in effects:
            if isinstance(effect, Send):
                yield effect.type, wire.encode(effect.event), wire.encode(beta.to_beta(effect.event))


def record() -> None:
    with GOLDEN.open("w") as out:
        for kind, ga, beta_form in events():
            out.write(json.dumps({"type": kind, "ga": ga.decode(), "beta": beta_form.decode()}) + "\n")


if __name__ == "__main__":
    record()
    sys.stdout.write(f"recorded {GOLDEN}\n")

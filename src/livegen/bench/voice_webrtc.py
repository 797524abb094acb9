"""``livegen bench voice-webrtc``: WebRTC against the WebSocket, side by side, on one server.

One real server (the cascade) on a loopback port; turns alternate between a
WebSocket client (``voice_turns._ServerCall``) and a WebRTC call
(``client.webrtc.Caller``), each a fresh session, with the same spoken
questions (espeak-ng), so both see the same load. Per transport it reports,
from the end of the user's speech (in the audio sent) to the first answer
audio received by the client: p50 and p95. For WebRTC that is the first
frame off the answer track that is not silence, after Opus both ways and the
receivers' jitter buffers (the server's holds one frame, the stock aiortc
client's four, ~80 ms); for the WebSocket the first delta, which arrives up to
200 ms ahead of its playback time (the session's lead) and still has the
client's own jitter buffer to go through. ``first_loud_audio`` skips the
voice's leading silence (samples above ``LOUD``).
Then barge-in: the user talks over a long answer, and the time from
``speech_started`` (on the data channel) to the last loud frame of the old
answer on the track.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import click
import numpy as np

PROMPTS = ("what time is it", "what is twelve times seven", "what day is it", "hello there")
LOUD = 500
#: Above the Opus codec's rendering of the track's digital silence: the answer's first audio.
AUDIBLE = 8

Times = tuple[float | None, float | None]


def _percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


async def _ws_turn(server: Any, utterance: Any, silence_ms: int) -> Times:
    import websockets

    from livegen.bench.voice_turns import WIRE_RATE, _ServerCall

    async with websockets.connect(f"{server.ws_url}/v1/realtime?model=cascade", max_size=None) as socket:
        call = _ServerCall(socket)
        try:
            await call.configure(silence_ms)
            end = await call.feed(utterance.pcm24)
            await call.feed(bytes(2 * 6 * WIRE_RATE), until=lambda: _first_loud_delta(call))
            first, loud = _first_loud_delta(call, 0), _first_loud_delta(call)
            return _since(end, first), _since(end, loud)
        finally:
            await call.close()


async def _rtc_call(server: Any, silence_ms: int) -> Any:
    from livegen.client.webrtc import Caller, mint

    detection = {"type": "server_vad", "silence_duration_ms": silence_ms}
    session = {"type": "realtime", "audio": {"input": {"turn_detection": detection}}}
    caller = Caller(server.http_url, mint(server.http_url, session=session)["value"])
    await caller.connect()
    await caller.event("session.updated", within=20)
    return caller


async def _spoken(caller: Any, pcm24: bytes) -> float:
    """Say ``pcm24`` on the call's microphone; the monotonic time its last frame went out."""
    caller.microphone.say(pcm24)
    await caller.microphone.drained.wait()
    assert caller.microphone.drained_at is not None
    return float(caller.microphone.drained_at)


async def _rtc_turn(server: Any, utterance: Any, silence_ms: int) -> Times:
    caller = await _rtc_call(server, silence_ms)
    try:
        end = await _spoken(caller, utterance.pcm24)
        for _ in range(1000):  # 20 s at most
            if caller.first_loud_after(end, LOUD) is not None:
                break
            await asyncio.sleep(0.02)
        return _since(end, caller.first_loud_after(end, AUDIBLE)), _since(
            end, caller.first_loud_after(end, LOUD)
        )
    finally:
        await caller.close()


def _since(start: float, at: float | None) -> float | None:
    return None if at is None else float((at - start) * 1000)


async def _rtc_barge_in(server: Any, question: Any, interruption: Any, silence_ms: int) -> float | None:
    """From ``speech_started`` over a playing answer to the last loud frame of that answer."""
    caller = await _rtc_call(server, silence_ms)
    try:
        await _spoken(caller, question.pcm24)
        started = await caller.event("output_audio_buffer.started", within=30)
        await asyncio.sleep(1.0)
        mark = len(caller.events)
        await _spoken(caller, interruption.pcm24)
        heard = await caller.wait_for(
            lambda e: e["type"] == "input_audio_buffer.speech_started" and caller.events.index(e) >= mark,
            within=10,
            what="speech_started",
        )
        heard_at = caller.event_times[id(heard)]
        await caller.wait_for(
            lambda e: (
                e["type"] == "output_audio_buffer.cleared" and e.get("response_id") == started["response_id"]
            ),
            within=10,
            what="the answer cleared",
        )
        await asyncio.sleep(1.0)
        loud = [t for t, pcm in caller.frames if t >= heard_at and _is_loud(pcm)]
        # The interrupting turn's own answer comes later than a second: only the old answer's tail counts.
        tail = [t for t in loud if t - heard_at < 1.0]
        return max(0.0, (max(tail) - heard_at) * 1000) if tail else 0.0
    finally:
        await caller.close()


def _first_loud_delta(call: Any, level: int = LOUD) -> float | None:
    """When the first answer audio above ``level`` arrived (0: the first audio at all)."""
    from livegen.bench.voice_turns import _AUDIO_DELTAS

    for at, event in call.of(*_AUDIO_DELTAS):
        if _is_loud(base64.b64decode(event["delta"]), level):
            return float(at)
    return None


def _is_loud(pcm: bytes, level: int = LOUD) -> bool:
    return bool(np.abs(np.frombuffer(pcm, "<i2")).max(initial=0) > level) or (level == 0 and len(pcm) > 0)


async def _run(turns: int, silence_ms: int, barge_ins: int) -> dict[str, Any]:
    from livegen.bench.voice_turns import synthesise
    from livegen.server.config import ServerConfig
    from livegen.server.thread import ServerThread

    server = ServerThread(ServerConfig(api_key=None, voice_model="cascade", world_model="none")).start()
    try:
        await asyncio.to_thread(server.wait_ready)
        service = next(s for s in server.app.state.livegen.services if s.name == "voice")
        model = service.engine.models[service.engine.default_model]
        utterances = [await asyncio.to_thread(synthesise, model, text) for text in PROMPTS]
        long_question = await asyncio.to_thread(synthesise, model, "what can you do")
        results: dict[str, dict[str, list[float]]] = {
            name: {"first_audio": [], "first_loud_audio": []} for name in ("websocket", "webrtc")
        }
        missed = {"websocket": 0, "webrtc": 0}
        for i in range(turns):
            utterance = utterances[i % len(utterances)]
            for name, turn in (("websocket", _ws_turn), ("webrtc", _rtc_turn)):
                first, loud = await turn(server, utterance, silence_ms)
                if first is None or loud is None:
                    missed[name] += 1
                else:
                    results[name]["first_audio"].append(first)
                    results[name]["first_loud_audio"].append(loud)
        cuts = []
        for _ in range(barge_ins):
            cut = await _rtc_barge_in(server, long_question, utterances[0], silence_ms)
            if cut is not None:
                cuts.append(cut)
    finally:
        server.stop()
    report: dict[str, Any] = {"turns": turns, "silence_duration_ms": silence_ms}
    for name, series in results.items():
        report[name] = {"turns_measured": len(series["first_audio"]), "turns_missed": missed[name]}
        for metric, values in series.items():
            report[name][f"{metric}_ms_p50"] = _percentile(values, 50)
            report[name][f"{metric}_ms_p95"] = _percentile(values, 95)
    report["webrtc_barge_in_to_silence_ms"] = {"p50": _percentile(cuts, 50), "max": max(cuts, default=None)}
    return report


@click.command("voice-webrtc")
@click.option("--turns", default=20, show_default=True, type=click.IntRange(1), help="Turns per transport.")
@click.option("--silence-ms", default=500, show_default=True, help="server_vad silence_duration_ms.")
@click.option(
    "--barge-ins", default=3, show_default=True, type=click.IntRange(0), help="Barge-ins over WebRTC."
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None)
def command(turns: int, silence_ms: int, barge_ins: int, json_path: Path | None) -> None:
    """End of speech to first answer audio, WebRTC vs WebSocket on one server; barge-in to silence."""
    report = asyncio.run(_run(turns, silence_ms, barge_ins))
    text = json.dumps(report, indent=2)
    click.echo(text)
    if json_path is not None:
        json_path.write_text(text + "\n")

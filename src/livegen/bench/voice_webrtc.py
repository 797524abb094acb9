"""``livegen bench voice-webrtc``: WebRTC against the WebSocket, side by side, on one server.

One real server (the cascade) on a loopback port; turns alternate between a
WebSocket client (``voice_turns._ServerCall``) and a WebRTC call
(``client.webrtc.Caller``), each a fresh session, with the same spoken
questions (espeak-ng), so both see the same load. Per transport it reports,
from the end of the user's speech (in the audio sent) to the first answer
audio received by the client: p50 and p95. For WebRTC that is the first loud
frame off the answer track, after Opus both ways and the receiver's jitter
buffer; for the WebSocket the first delta with loud audio (both skip the
voice's leading silence). The WebSocket's audio arrives up to 200 ms ahead of
its playback time (the session's lead) and still has the client's own jitter
buffer to go through; the track's arrives at playback time, after aiortc's
audio jitter buffer on each side (it holds 4 packets, ~80 ms, before decoding).
Then barge-in: the user talks over a long answer, and the time from
``speech_started`` (on the data channel) to the last loud frame of the old
answer on the track.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

PROMPTS = ("what time is it", "what is twelve times seven", "what day is it", "hello there")
LOUD = 500


def _percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


async def _ws_turn(server: Any, utterance: Any, silence_ms: int) -> float | None:
    import websockets

    from livegen.bench.voice_turns import WIRE_RATE, _ServerCall

    async with websockets.connect(f"{server.ws_url}/v1/realtime?model=cascade", max_size=None) as socket:
        call = _ServerCall(socket)
        try:
            await call.configure(silence_ms)
            end = await call.feed(utterance.pcm24)
            await call.feed(bytes(2 * 6 * WIRE_RATE), until=lambda: _first_loud_delta(call))
            first = _first_loud_delta(call)
            return None if first is None else (first - end) * 1000
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


async def _rtc_turn(server: Any, utterance: Any, silence_ms: int) -> float | None:
    caller = await _rtc_call(server, silence_ms)
    try:
        end = await _spoken(caller, utterance.pcm24)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            first = caller.first_loud_after(end, LOUD)
            if first is not None:
                return float((first - end) * 1000)
            await asyncio.sleep(0.02)
        return None
    finally:
        await caller.close()


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


def _first_loud_delta(call: Any) -> float | None:
    """When the first answer audio above ``LOUD`` arrived (as on the track: a voice's leading
    silence is not the answer being heard)."""
    from livegen.bench.voice_turns import _AUDIO_DELTAS

    for at, event in call.of(*_AUDIO_DELTAS):
        if _is_loud(base64.b64decode(event["delta"])):
            return float(at)
    return None


def _is_loud(pcm: bytes) -> bool:
    return bool(np.abs(np.frombuffer(pcm, "<i2")).max(initial=0) > LOUD)


async def _run(turns: int, silence_ms: int, barge_ins: int) -> dict[str, Any]:
    from livegen.bench.voice_turns import synthesise
    from livegen.server.config import ServerConfig
    from livegen.server.thread import ServerThread

    server = ServerThread(ServerConfig(api_key=None, voice_model="cascade", world_model="none")).start()
    try:
        await asyncio.to_thread(server.wait_ready)
        service = next(s for s in server.app.state.livegen.services if s.name == "voice")
        model = service.models[service.default_model]
        utterances = [await asyncio.to_thread(synthesise, model, text) for text in PROMPTS]
        long_question = await asyncio.to_thread(synthesise, model, "what can you do")
        results: dict[str, list[float]] = {"websocket": [], "webrtc": []}
        missed = {"websocket": 0, "webrtc": 0}
        for i in range(turns):
            utterance = utterances[i % len(utterances)]
            for name, turn in (("websocket", _ws_turn), ("webrtc", _rtc_turn)):
                ms = await turn(server, utterance, silence_ms)
                if ms is None:
                    missed[name] += 1
                else:
                    results[name].append(ms)
        cuts = []
        for _ in range(barge_ins):
            cut = await _rtc_barge_in(server, long_question, utterances[0], silence_ms)
            if cut is not None:
                cuts.append(cut)
    finally:
        server.stop()
    report: dict[str, Any] = {"turns": turns, "silence_duration_ms": silence_ms}
    for name, values in results.items():
        report[name] = {
            "first_audio_ms_p50": _percentile(values, 50),
            "first_audio_ms_p95": _percentile(values, 95),
            "turns_measured": len(values),
            "turns_missed": missed[name],
        }
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

"""``livegen bench voice-live``: end of speech to first audio over GPT-Live against the Realtime API.

One real server (the app ``livegen serve`` runs) on a loopback port, the
embedded voice model, the official openai SDK as the client: each turn is a
new session (``client.live.connect`` with ``session.start``, or
``client.realtime.connect`` with the same transcription on), the user's
question streamed at the pace of speech and then the silence a microphone
keeps sending, and the time from the last chunk of the speech to the first
audible output byte the client gets. The two routes alternate turn by turn
(ABBA), so that load drifts alike on both; the report is the median per
route and their difference (the issue's goal: within 20 ms), with the model
that served both and the machine's load average before and after the run
(the figures mean little on a busy machine without it).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import statistics
import time
from typing import Any

import click

from livegen.bench.voice_turns import USER_VOICE, WIRE_RATE, Utterance, _paced, synthesise

QUESTION = "What is twelve times seven?"
KEY = "sk-bench"
ROUTES = ("realtime", "live")
_AUDIO = {"live": "session.output_audio.delta", "realtime": "response.output_audio.delta"}
_APPEND = {"live": "session.input_audio.append", "realtime": "input_audio_buffer.append"}


async def _turn(http_url: str, ws_url: str, route: str, utterance: Utterance) -> float:
    """Milliseconds from the end of the speech to the first audible output byte."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key=KEY, base_url=f"{http_url}/v1", websocket_base_url=f"{ws_url}/v1")
    heard: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    manager: Any = client.live.connect() if route == "live" else client.realtime.connect(model="gpt-realtime")
    async with client, manager as connection:
        await _open(connection, route)

        async def read() -> None:
            while True:
                event = json.loads(await connection.recv_bytes())
                audible = event["type"] == _AUDIO[route] and any(base64.b64decode(event["delta"]))
                if audible and not heard.done():
                    heard.set_result(time.perf_counter())

        async def send(chunk: bytes) -> None:
            await connection.send({"type": _APPEND[route], "audio": base64.b64encode(chunk).decode()})

        reader = asyncio.ensure_future(read())
        try:
            ended = await _paced(utterance.pcm24, WIRE_RATE, send, None)
            silence = bytes(WIRE_RATE * 2 * 10)  # ten seconds of microphone silence, at most
            await _paced(silence, WIRE_RATE, send, heard.done)
            async with asyncio.timeout(30):
                first_audio = await heard
            return (first_audio - ended) * 1000
        finally:
            reader.cancel()


async def _open(connection: Any, route: str) -> None:
    if route == "live":
        await connection.send({"type": "session.start", "session": {"model": "gpt-live-1"}})
        wanted = "session.started"
    else:
        transcribe = {"audio": {"input": {"transcription": {"model": "whisper-1"}}}}
        await connection.send({"type": "session.update", "session": {"type": "realtime", **transcribe}})
        wanted = "session.updated"
    while (kind := json.loads(await connection.recv_bytes())["type"]) != wanted:
        if kind == "error":
            raise click.ClickException(f"the {route} session did not open")


async def _run(turns: int) -> tuple[str, dict[str, list[float]]]:
    from livegen.models import default_registry
    from livegen.server import ServerConfig
    from livegen.server.thread import ServerThread

    registry = default_registry()
    server = ServerThread(ServerConfig(api_key=KEY, world_model="none"), registry).start()
    try:
        server.wait_ready(timeout=300)
        utterance = synthesise(registry.load("cascade"), QUESTION)
        await _turn(server.http_url, server.ws_url, "realtime", utterance)  # warm-up, not counted
        times: dict[str, list[float]] = {route: [] for route in ROUTES}
        for index in range(turns):
            for route in ROUTES if index % 2 == 0 else ROUTES[::-1]:
                times[route].append(await _turn(server.http_url, server.ws_url, route, utterance))
        return server.app.state.livegen.voice_model.name, times
    finally:
        server.stop()


@click.command("voice-live")
@click.option("--turns", default=10, show_default=True, help="Turns per route (alternated).")
def command(turns: int) -> None:
    """End of speech to first audio: /v1/live/sessions against /v1/realtime, one server."""
    load_before = os.getloadavg()
    model, times = asyncio.run(_run(turns))
    load_after = os.getloadavg()
    click.echo(f"model {model} on both routes, user voice {USER_VOICE}, question {QUESTION!r}")
    click.echo(f"{turns} turns per route, alternated; {os.cpu_count()} CPUs, load average (1/5/15 min)")
    click.echo(f"  before {_load(load_before)}, after {_load(load_after)}")
    for route in ROUTES:
        runs = " ".join(f"{t:.0f}" for t in times[route])
        click.echo(f"{route:>9}: median {statistics.median(times[route]):.0f} ms  ({runs})")
    difference = statistics.median(times["live"]) - statistics.median(times["realtime"])
    click.echo(f"live - realtime: {difference:+.0f} ms (goal: within 20 ms)")


def _load(averages: tuple[float, float, float]) -> str:
    return "/".join(f"{a:.1f}" for a in averages)

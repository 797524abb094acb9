"""``livegen bench voice-preambles``: time to first audio when the language model is slow, with
and without a spoken preamble (``models/cascade/preambles.py``).

A scripted OpenAI-compatible chat endpoint on loopback holds every answer back ``--endpoint-ms``
before its first byte (a slow, thinking model). The cascade serves a real server on loopback, and
the official OpenAI SDK asks a text turn in a fresh session each round, timing ``response.create``
to the first ``response.output_audio.delta``: once with ``Preamble: on`` in the instructions and
once without. With ``--neighbour`` a second session keeps the server busy
meanwhile, back to back turns whose answers (long, at once: its messages name it) keep the speech
workers synthesising.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

import click

from livegen.bench.voice_tools import endpoint, percentile_ms, sse_chunk, until

SPOKEN = "Paris is the capital of France."
NEIGHBOUR = "neighbour"
LONG = "This is a long answer for the busy neighbour, said sentence by sentence. " * 6


class _Endpoint(BaseHTTPRequestHandler):
    latency_s = 2.0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        is_neighbour = NEIGHBOUR in json.dumps(body["messages"][-1])
        if not is_neighbour:
            time.sleep(self.latency_s)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        text = LONG if is_neighbour else SPOKEN
        for chunk in [sse_chunk({"content": text}), sse_chunk({}, "stop"), b"data: [DONE]\n\n"]:
            self.wfile.write(chunk)
            self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def _turn(client: Any, instructions: str, text: str) -> float:
    """One text turn in a fresh session: seconds from response.create to the first audio."""
    async with client.realtime.connect(model="gpt-realtime") as connection:
        session = {
            "type": "realtime",
            "instructions": instructions,
            "audio": {"input": {"turn_detection": None}},
        }
        await connection.session.update(session=session)
        await until(connection, "session.updated")
        content = [{"type": "input_text", "text": text}]
        await connection.conversation.item.create(
            item={"type": "message", "role": "user", "content": content}
        )
        started = time.perf_counter()
        await connection.response.create()
        await until(connection, "response.output_audio.delta")
        first = time.perf_counter() - started
        await until(connection, "response.done")
        return first


async def _neighbour(client: Any) -> None:
    while True:
        await _turn(client, "Be brief.", f"Talk on, {NEIGHBOUR}.")


async def _rounds(ws_url: str, rounds: int, busy: bool) -> dict[str, list[float]]:
    from openai import AsyncOpenAI

    client: Any = AsyncOpenAI(
        api_key="unused", base_url=ws_url.replace("ws", "http", 1), websocket_base_url=ws_url
    )
    neighbour = asyncio.ensure_future(_neighbour(client)) if busy else None
    times: dict[str, list[float]] = {"preamble": [], "no preamble": []}
    try:
        for _ in range(rounds):
            times["preamble"].append(await _turn(client, "Be brief.\nPreamble: on", "The capital of France?"))
            times["no preamble"].append(await _turn(client, "Be brief.", "The capital of France?"))
    finally:
        if neighbour is not None:
            neighbour.cancel()
            with contextlib.suppress(BaseException):
                await neighbour
    return times


@click.command("voice-preambles")
@click.option(
    "--rounds", default=5, show_default=True, type=click.IntRange(1), help="Turns measured per mode."
)
@click.option(
    "--endpoint-ms", default=2000, show_default=True, type=click.IntRange(0), help="The model's latency."
)
@click.option("--neighbour/--no-neighbour", default=False, help="A second session keeps the server busy.")
def command(rounds: int, endpoint_ms: int, neighbour: bool) -> None:
    """Benchmark time to first audio of a slow answer, with and without a spoken preamble."""
    from livegen.models.cascade import model as cascade
    from livegen.server.config import ServerConfig
    from livegen.server.thread import ServerThread

    click.echo("loading the cascade (Whisper, Piper worker)...", err=True)
    loaded = cascade.load()
    with endpoint(endpoint_ms / 1000, _Endpoint) as url:
        config = ServerConfig(
            api_key=None, voice_model="cascade", world_model="none", llm_base_url=url, llm_model="b"
        )
        server = ServerThread(config).start()
        try:
            server.wait_ready(timeout=300)
            asyncio.run(_rounds(server.ws_url + "/v1", 1, False))  # warm up (and learn the endpoint)
            times = asyncio.run(_rounds(server.ws_url + "/v1", rounds, neighbour))
        finally:
            server.stop()
            loaded.use_llm(None, None)
            loaded.close()
    load = "a busy neighbour session" if neighbour else "quiet"
    click.echo(
        f"voice-preambles: {rounds} turns a mode, endpoint {endpoint_ms} ms before its first byte, {load}"
    )
    for mode, values in times.items():
        p50, p95 = percentile_ms(values, 0.5), percentile_ms(values, 0.95)
        click.echo(f"  {mode}: response.create -> first audio p50 {p50:.0f} ms, p95 {p95:.0f} ms")

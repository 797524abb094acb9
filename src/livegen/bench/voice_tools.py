"""``livegen bench voice-tools``: livegen's own overhead on a function-calling turn.

A scripted OpenAI-compatible chat endpoint on loopback answers every request
after a fixed latency (``--endpoint-ms``, before its first byte): a user's
question with one tool call, streamed as vLLM streams it (id and name, then
the arguments in fragments), and a tool's output with one spoken sentence.
The cascade serves a real server on a loopback port (``--llm-base-url`` at the
endpoint), and the official OpenAI SDK plays an agent with text turns:

- from ``response.create`` of the user's turn to
  ``response.function_call_arguments.done``, and that minus the endpoint's
  fixed latency: livegen's own overhead (p50, p95);
- from ``response.create`` after the call's output to the first
  ``response.output_audio.delta`` of the spoken result (the endpoint's
  latency, the first sentence's synthesis, livegen), and that minus the
  endpoint's latency.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import click

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ARGUMENTS = '{"city": "Paris"}'
SPOKEN = "It is sunny in Paris, twenty one degrees."


def sse_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    """One server-sent event of an OpenAI-compatible chat stream (the scripted endpoints' answers)."""
    body = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


class _Endpoint(BaseHTTPRequestHandler):
    latency_s = 0.1

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(self.latency_s)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if body["messages"][-1]["role"] == "tool":
            chunks = [sse_chunk({"content": SPOKEN}), sse_chunk({}, "stop")]
        else:
            head = {"index": 0, "id": "call_bench", "type": "function"}
            head["function"] = {"name": "get_weather", "arguments": ""}
            chunks = [sse_chunk({"tool_calls": [head]})]
            for start in range(0, len(ARGUMENTS), 5):
                fragment = {"index": 0, "function": {"arguments": ARGUMENTS[start : start + 5]}}
                chunks.append(sse_chunk({"tool_calls": [fragment]}))
            chunks.append(sse_chunk({}, "tool_calls"))
        for chunk in [*chunks, b"data: [DONE]\n\n"]:
            self.wfile.write(chunk)
            self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def endpoint(latency_s: float, answers: type[BaseHTTPRequestHandler] | None = None) -> Iterator[str]:
    """A scripted chat endpoint on loopback (``answers``: its handler, this bench's by default) whose
    handler holds ``latency_s``; yields its base URL."""
    handler = type("Endpoint", (answers or _Endpoint,), {"latency_s": latency_s})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def until(connection: Any, kind: str) -> Any:
    """The next event of ``kind`` on an SDK connection; a server error stops the bench."""
    while True:
        async with asyncio.timeout(60):
            event = await connection.recv()
        if event.type == kind:
            return event
        if event.type == "error":
            raise click.ClickException(f"the server refused: {event.error.message}")


async def _turns(ws_url: str, rounds: int) -> tuple[list[float], list[float]]:
    from openai import AsyncOpenAI

    # Any: the SDK's TypedDicts for items are stricter than the plain dicts a user writes.
    client: Any = AsyncOpenAI(
        api_key="unused", base_url=ws_url.replace("ws", "http", 1), websocket_base_url=ws_url
    )
    to_call: list[float] = []
    to_audio: list[float] = []
    for _ in range(rounds):  # a fresh session each round: the prompt stays the same size
        async with client.realtime.connect(model="gpt-realtime") as connection:
            session = {"type": "realtime", "tools": [WEATHER], "audio": {"input": {"turn_detection": None}}}
            await connection.session.update(session=session)
            await until(connection, "session.updated")
            content = [{"type": "input_text", "text": "What is the weather in Paris?"}]
            await connection.conversation.item.create(
                item={"type": "message", "role": "user", "content": content}
            )
            started = time.perf_counter()
            await connection.response.create()
            args = await until(connection, "response.function_call_arguments.done")
            to_call.append(time.perf_counter() - started)
            await until(connection, "response.done")
            item = {"type": "function_call_output", "call_id": args.call_id, "output": '{"sky": "sunny"}'}
            await connection.conversation.item.create(item=item)
            started = time.perf_counter()
            await connection.response.create()
            await until(connection, "response.output_audio.delta")
            to_audio.append(time.perf_counter() - started)
            await until(connection, "response.done")
    return to_call, to_audio


def percentile_ms(values: list[float], q: float) -> float:
    """The ``q`` quantile of seconds ``values``, in milliseconds (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


@click.command("voice-tools")
@click.option("--rounds", default=20, show_default=True, type=click.IntRange(1), help="Turns measured.")
@click.option(
    "--endpoint-ms",
    default=100,
    show_default=True,
    type=click.IntRange(0),
    help="The endpoint's fixed latency.",
)
def command(rounds: int, endpoint_ms: int) -> None:
    """Benchmark a function-calling turn: to the call's arguments, from its output to the answer's audio."""
    from livegen.models.cascade import model as cascade
    from livegen.server.config import ServerConfig
    from livegen.server.thread import ServerThread

    click.echo("loading the cascade (Whisper, Piper worker)...", err=True)
    loaded = cascade.load()
    with endpoint(endpoint_ms / 1000) as url:
        config = ServerConfig(
            api_key=None, voice_model="cascade", world_model="none", llm_base_url=url, llm_model="bench"
        )
        server = ServerThread(config).start()
        try:
            server.wait_ready(timeout=300)
            asyncio.run(_turns(server.ws_url + "/v1", 1))  # warm up
            to_call, to_audio = asyncio.run(_turns(server.ws_url + "/v1", rounds))
        finally:
            server.stop()
            loaded.use_llm(None, None)
            loaded.close()
    fixed = endpoint_ms
    click.echo(f"voice-tools: {rounds} text turns, endpoint latency {fixed} ms before its first byte")
    for name, values in (
        ("response.create -> function_call_arguments.done", to_call),
        ("output's response.create -> first audio", to_audio),
    ):
        p50, p95 = percentile_ms(values, 0.5), percentile_ms(values, 0.95)
        click.echo(
            f"  {name}: p50 {p50:.1f} ms, p95 {p95:.1f} ms; "
            f"minus the endpoint: p50 {p50 - fixed:.1f} ms, p95 {p95 - fixed:.1f} ms "
            f"(mean {statistics.mean(values) * 1000:.1f} ms)"
        )

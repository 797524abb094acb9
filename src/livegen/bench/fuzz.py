"""``livegen bench fuzz``: abusive input against a real server, bounded in time, measured from outside.

A ``livegen serve`` subprocess (its own interpreter, so the probe shares no GIL
with it) takes one family of abusive messages at a time on a fuzzing socket,
as fast as it answers: deep nesting, a wrong type in every field, huge
integers, binary messages, invalid UTF-8 frames (each closes its socket:
reconnect; the server runs with ``--resume-grace 0`` so that they are not parked), the
largest append a frame can carry, world messages, and ``mcp``: session updates naming hostile
MCP servers (``mcp_hostile``: 10,000 tools, 200 MiB and endless listings, gzip, hangs...) or MCP
tools with a malformed field. Meanwhile
a second voice session sends a probe event every 10 ms and times its answer:
the longest probe round trip over a family is the longest the server's event
loop stalled for it (plus the probe's own few ms). The probe runs in a process
of its own, so the fuzzer's work (encoding 13 MiB) never delays it. The server's log is read
after: every traceback or error line is counted (goal: 0).

Prints (and with ``--json`` writes) per family: messages sent, replies,
sessions the server ended (goal 0; invalid UTF-8 excepted, which closes by
rule), probe p50/p99/max ms; and the log's traceback and error counts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import websockets
from websockets.frames import Frame, Opcode

from livegen.bench.fuzz_cases import mcp_case, voice_case, voice_fields, world_cases
from livegen.bench.mcp_hostile import ATTACKS, serve_hostile

SERVE = [sys.executable, "-m", "livegen", "serve"]
FAMILIES = ("nesting", "wrong_type", "huge", "binary", "invalid_utf8", "big_append", "world", "mcp")
PROBE_PERIOD_S = 0.01
#: The ``mcp`` family's hostile MCP servers are on loopback; their deadline is short.
MCP_OPTIONS = ("--mcp-allowed-hosts", "127.0.0.1", "--mcp-timeout", "5")
#: A 13 MiB message once base64-encoded: the largest append under the 16 MiB frame limit.
BIG_APPEND_BYTES = int(9.75 * 1024 * 1024)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_healthy(port: int, server: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise click.ClickException("the bench server exited")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise click.ClickException("the bench server did not become ready")


async def _probe(url: str, stop: Any, times: list[float]) -> None:
    """One voice session asking for a missing item every 10 ms; the round trips."""
    async with websockets.connect(url) as ws:
        await ws.recv()
        index = 0
        while not stop.is_set():
            index += 1
            start = time.perf_counter()
            await _answered(ws, f"p{index}")
            times.append((time.perf_counter() - start) * 1000.0)
            await asyncio.sleep(PROBE_PERIOD_S)


def _probe_process(url: str, stop: Any, results: Any) -> None:
    """The probe in a process of its own, so the fuzzer's CPU work never delays it."""
    times: list[float] = []
    asyncio.run(_probe(url, stop, times))
    results.put(times)


class Probe:
    def __init__(self, url: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._results: Any = context.Queue()
        self._process = context.Process(target=_probe_process, args=(url, self._stop, self._results))
        self._process.start()

    async def finish(self) -> list[float]:
        self._stop.set()
        times: list[float] = await asyncio.to_thread(self._results.get, True, 60)
        await asyncio.to_thread(self._process.join, 30)
        return times


async def _answered(ws: Any, event_id: str) -> int:
    """Send a sentinel (always answered by one error) and read up to its answer; replies before it."""
    await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "?", "event_id": event_id}))
    count = 0
    async with asyncio.timeout(60):
        while json.loads(await ws.recv()).get("error", {}).get("event_id") != event_id:
            count += 1
    return count


async def _fuzz_voice(
    url: str, family: str, seconds: float, rng: random.Random, big: str, mcp_base: str = ""
) -> tuple[int, int, int]:
    """(messages sent, replies, sessions lost: ended by the server when they should have gone on)."""
    fields = voice_fields()
    sent = replies = lost = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        async with websockets.connect(url, max_size=None) as ws:
            await ws.recv()
            try:
                while time.monotonic() < deadline:
                    if family == "invalid_utf8":
                        ws.protocol.send_frame(Frame(Opcode.TEXT, b"\xff\xfe" + rng.randbytes(8)))
                        ws.send_data()
                        sent += 1
                        with contextlib.suppress(websockets.ConnectionClosed):
                            await ws.recv()  # the server closes with 1007: then a new socket
                        break
                    message: str | bytes
                    if family == "mcp":
                        message = mcp_case(rng, mcp_base, ATTACKS)
                    else:
                        message = big if family == "big_append" else voice_case(rng, family, fields)
                    await ws.send(message)
                    sent += 1
                    replies += await _answered(ws, f"s{sent}")  # the fuzzer never runs ahead
            except (websockets.ConnectionClosed, TimeoutError):
                lost += 1
    return sent, replies, lost


async def _fuzz_world(url: str, seconds: float, rng: random.Random) -> tuple[int, int, int]:
    sent = replies = lost = 0
    deadline = time.monotonic() + seconds
    cases = world_cases(rng, 10**9)
    while time.monotonic() < deadline:
        async with websockets.connect(url) as ws:
            try:
                while time.monotonic() < deadline:
                    await ws.send(next(cases))
                    sent += 1
                    async with asyncio.timeout(30):
                        await ws.recv()
                    replies += 1
            except (websockets.ConnectionClosed, TimeoutError):
                lost += 1
    return sent, replies, lost


def _stats(times: list[float]) -> dict[str, float]:
    ordered = sorted(times) or [0.0]

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"probes": len(times), "probe_p50_ms": at(0.5), "probe_p99_ms": at(0.99), "probe_max_ms": at(1.0)}


async def _run(port: int, seconds: float, seed: int, mcp_base: str) -> dict[str, Any]:
    voice_url, world_url = f"ws://127.0.0.1:{port}/v1/realtime", f"ws://127.0.0.1:{port}/v1/worlds"
    rng = random.Random(seed)
    big = json.dumps(
        {
            "type": "input_audio_buffer.append",
            "audio": base64.b64encode(rng.randbytes(BIG_APPEND_BYTES)).decode(),
        }
    )
    probe = Probe(voice_url)
    await asyncio.sleep(seconds)
    report: dict[str, Any] = {"quiet": {"sent": 0, **_stats(await probe.finish())}}
    for family in FAMILIES:
        probe = Probe(voice_url)
        await asyncio.sleep(1.0)  # the probe's interpreter starts before the family does
        if family == "world":
            sent, replies, lost = await _fuzz_world(world_url, seconds, rng)
        else:
            sent, replies, lost = await _fuzz_voice(voice_url, family, seconds, rng, big, mcp_base)
        counts = {"sent": sent, "replies": replies, "sessions_lost": lost}
        report[family] = {**counts, **_stats(await probe.finish())}
    return report


def _count_log(path: Path) -> dict[str, int]:
    lines = path.read_text(errors="replace").splitlines()
    return {
        "log_lines": len(lines),
        "tracebacks": sum("Traceback" in line for line in lines),
        "error_lines": sum("level=error" in line for line in lines),
    }


@click.command("fuzz")
@click.option("--seconds", default=5.0, show_default=True, help="Fuzzing time per family.")
@click.option("--seed", default=18, show_default=True, help="Seed of the message generator.")
@click.option(
    "--world-model", default="procedural-world", show_default=True, help="The server's world model."
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the report here."
)
def command(seconds: float, seed: int, world_model: str, json_path: str | None) -> None:
    """Fuzz a real server over the wire; count tracebacks and time the longest stall."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp, serve_hostile() as hostile:
        log_path = Path(tmp) / "server.log"
        with log_path.open("wb") as log:
            server = subprocess.Popen(
                # --resume-grace 0: each 1007 close would park a session otherwise
                [
                    *SERVE,
                    "--port",
                    str(port),
                    "--world-model",
                    world_model,
                    "--resume-grace",
                    "0",
                    *MCP_OPTIONS,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={k: v for k, v in os.environ.items() if k != "LIVEGEN_API_KEY"},
            )
            try:
                _wait_healthy(port, server)
                report = asyncio.run(_run(port, seconds, seed, hostile.base))
                report["server_alive"] = server.poll() is None
            finally:
                server.terminate()
                server.wait(timeout=30)
        report["log"] = _count_log(log_path)
    text = json.dumps(report, indent=2)
    click.echo(text)
    if json_path:
        Path(json_path).write_text(text + "\n")

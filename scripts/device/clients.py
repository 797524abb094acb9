"""Live WebSocket clients against a running ``livegen serve --voice-model moshi``: the device check's
served figure, what sessions see when the frame clock is shared by as many as the table says fit.

Each client opens ``/v1/realtime`` as an OpenAI Realtime client does and streams 80 ms appends of
a quiet room's noise (24 kHz, 16-bit, below the session's speech detector, so the model is never
talked over and speaks whenever it chooses) at the pace of a microphone for ``--seconds``; they
open spread over one frame, as independent users do. Per client it records the first audio (the
socket open to the first ``response.output_audio.delta``: the model speaks first, without waiting
for a turn) and the audio received. The server's own figures come
from outside it: missed frames and step time from ``/health`` (the clock's ``duplex_missed_frames``
over the streaming window), its CPU from ``/proc/PID/stat`` over the same window.

    python scripts/device/clients.py --port P --sessions N --seconds 60 --server-pid PID OUT.json
"""

from __future__ import annotations

import argparse
import asyncio  # noqa: TID251 (a client, not a sans-IO core)
import base64
import json
import os
import statistics
import time  # noqa: TID251 (it measures wall time)
import urllib.request
from pathlib import Path
from typing import Any

FRAME_S = 0.08
SAMPLE_RATE = 24000


def noise_append(seed: int) -> str:
    """One 80 ms append of a quiet room (-60 dBFS), encoded once: every frame costs the model the
    same whatever it holds, and a quiet one leaves the model free to talk, so answers flow back."""
    import numpy as np

    pcm = np.random.default_rng(seed).normal(0, 30, int(SAMPLE_RATE * FRAME_S))
    audio = base64.b64encode(pcm.clip(-32768, 32767).astype("<i2").tobytes()).decode()
    return json.dumps({"type": "input_audio_buffer.append", "audio": audio})


async def client(url: str, index: int, seconds: float, start_at: float) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    append = noise_append(index)
    result: dict[str, Any] = {"first_audio_ms": None, "audio_bytes": 0, "errors": []}
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    async with connect(url, max_size=None, open_timeout=60) as ws:
        begun = time.monotonic()

        async def send() -> None:
            frame = 0
            while (due := begun + frame * FRAME_S) < begun + seconds:
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                await ws.send(append)
                frame += 1
            result["frames_sent"] = frame

        async def receive() -> None:
            async for message in ws:
                event = json.loads(message)
                kind = event.get("type")
                if kind == "response.output_audio.delta":
                    if result["first_audio_ms"] is None:
                        result["first_audio_ms"] = round(1000 * (time.monotonic() - begun), 1)
                    result["audio_bytes"] += len(base64.b64decode(event["delta"]))
                elif kind == "error":
                    result["errors"].append(event.get("error", {}).get("code"))

        reader = asyncio.create_task(receive())
        await send()
        await asyncio.sleep(0.5)  # the last frames' answers
        reader.cancel()
    result["audio_s"] = round(result.pop("audio_bytes") / (2 * SAMPLE_RATE), 2)
    return result


def health(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
        return dict(json.loads(answer.read()))


def duplex_detail(report: Any) -> dict[str, Any]:
    """The first mapping in ``/health``'s answer that carries the frame clock's figures."""
    if isinstance(report, dict):
        if "duplex_missed_frames" in report:
            return report
        for value in report.values():
            if found := duplex_detail(value):
                return found
    return {}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summary(clients: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """What the sessions saw, together: first audio p50/max, audio received over the time streamed."""
    firsts = [c["first_audio_ms"] for c in clients if c["first_audio_ms"] is not None]
    return {
        "sessions": len(clients),
        "seconds": seconds,
        "sessions_with_audio": len(firsts),
        "first_audio_ms_p50": round(statistics.median(firsts), 1) if firsts else None,
        "first_audio_ms_max": max(firsts, default=None),
        "audio_s_per_session_min": min((c["audio_s"] for c in clients), default=0.0),
        "errors": sorted({code for c in clients for code in c["errors"]}),
    }


def wait_ready(port: int, limit_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + limit_s
    while True:
        try:
            return health(port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


async def measure(port: int, sessions: int, seconds: float, pid: int | None) -> dict[str, Any]:
    url = f"ws://127.0.0.1:{port}/v1/realtime?model=moshi"
    before = duplex_detail(health(port))
    cpu_before, wall_before = (cpu_seconds(pid) if pid else 0.0), time.monotonic()
    start_at = time.monotonic()
    offsets = [start_at + FRAME_S * i / sessions for i in range(sessions)]
    clients = await asyncio.gather(*(client(url, i, seconds, at) for i, at in enumerate(offsets)))
    wall = time.monotonic() - wall_before
    after = duplex_detail(health(port))
    report = summary(list(clients), seconds)
    report["missed_frames"] = after.get("duplex_missed_frames", 0) - before.get("duplex_missed_frames", 0)
    report["step_ms"] = after.get("duplex_step_ms")
    if pid:
        report["server_cpu_share"] = round((cpu_seconds(pid) - cpu_before) / wall, 3)
    report["clients"] = list(clients)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--server-pid", type=int, default=None)
    parser.add_argument("--ready-s", type=float, default=180.0, help="how long to wait for /health")
    args = parser.parse_args()
    wait_ready(args.port, args.ready_s)
    report = asyncio.run(measure(args.port, args.sessions, args.seconds, args.server_pid))
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "clients"}, indent=1))


if __name__ == "__main__":
    main()

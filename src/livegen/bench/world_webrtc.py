"""``livegen bench world-stream --webrtc``: a world session over WebRTC beside the same over the WebSocket.

One ``livegen serve`` subprocess serves the model; each level (1 and 4
sessions by default) plays its sessions first over the ``/v1/worlds``
WebSocket as the page did before calls (``world_stream.Page``: PNG frames,
acked at start, one chunk ahead), then over ``/v1/worlds/calls``
(``client.world_call.WorldCaller``: frames on a VP8 video track, acked by the
server's track). Every session asks for the page's one-frame chunks and
changes its action every 0.3-0.7 s. Per transport:

- input -> shown: from sending the event to showing the first frame of the
  chunk that applied it. On the WebSocket, the page-like player's show time;
  over WebRTC, when the track's frame at the header's ``video_pts`` was
  decoded. aiortc's receiver completes a frame only when the next frame's
  first packet comes (its jitter buffer splits frames by timestamp, not by the
  marker bit, as browsers do), a frame interval late; the figure takes that
  interval (the next frame's RTP time minus this one's) off, and
  ``aiortc_decoded_p50_ms`` keeps the time as aiortc had it;
- bytes per second per session: what the client received. WebSocket: the
  headers' JSON and the PNG frames; WebRTC: the whole transport (DTLS: RTP,
  RTCP and the channel's events), as aiortc's transport stats count it;
- the server process's CPU per frame shown (model, encoding, transport);
- the encoder's CPU per frame alone: aiortc's VP8 and H.264 encoders (PyAV's
  libvpx, libx264) timed in this process on frames the calls decoded, as the
  server encodes them (one frame at a time, CPU seconds of all threads).

Everything runs on one machine, clients included; the load average is in the
figures, and ``--busy-neighbour`` runs a spinning process beside it all.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from livegen.bench.world_stream import (
    ACTIONS,
    ARRIVAL_GAP_S,
    Page,
    _cpu_seconds,
    _free_port,
    _percentile,
    _round,
    start_server,
)


@dataclass
class CallStats:
    frames: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    #: As aiortc decoded them, a frame interval late (module docstring).
    decoded_ms: list[float] = field(default_factory=list)
    bytes: int = 0
    errors: list[str] = field(default_factory=list)
    #: Decoded frames, kept to time the encoders on.
    samples: list[np.ndarray] = field(default_factory=list)


async def _transport_bytes(caller: Any) -> int:
    report = await caller.pc.getStats()
    return sum(int(getattr(s, "bytesReceived", 0)) for s in report.values() if s.type == "transport")


async def play_call(base_url: str, seconds: float, warm_up: float, seed: int, ask: int | None) -> CallStats:
    """One session played over a call (module docstring)."""
    from livegen.client.world_call import PTS_SLACK, WorldCaller

    stats = CallStats()
    caller = WorldCaller(base_url)
    try:
        await caller.connect()
        session: dict[str, Any] = {"seed": seed, "prompt": "a forest room", "max_chunks_ahead": 1}
        if ask is not None:
            session["frames_per_chunk"] = ask
        caller.send({"type": "session.update", "session": session})
        first = await caller.wait_for(lambda e: e["type"] in ("session.created", "error"), 30, "created")
        if first["type"] == "error":
            stats.errors.append(first["error"]["code"])
            return stats
        sent_at: dict[int, float] = {}
        steering = asyncio.create_task(_steer(caller, seed, sent_at))
        await asyncio.sleep(warm_up)
        counted_from, frames_before = time.monotonic(), len(caller.frames)
        bytes_before = await _transport_bytes(caller)
        await asyncio.sleep(seconds - warm_up)
        steering.cancel()
        stats.bytes = await _transport_bytes(caller) - bytes_before
        stats.frames = len(caller.frames) - frames_before
        stats.samples = [frame.rgb for frame in caller.frames[-64:]]
        frames = caller.frames
        for header in (e for e in caller.events if e["type"] == "world.chunk"):
            at = next((i for i, f in enumerate(frames) if f.pts >= header["video_pts"] - PTS_SLACK), None)
            if at is None or at + 1 >= len(frames):
                continue
            held = (frames[at + 1].pts - frames[at].pts) / 90_000  # until the next frame completed it
            for event_id in header["applied_event_ids"]:
                sent = sent_at.get(event_id)
                if sent is not None and sent >= counted_from:
                    stats.decoded_ms.append(1000 * (frames[at].at - sent))
                    stats.latencies_ms.append(1000 * (frames[at].at - held - sent))
        stats.errors += [e["error"]["code"] for e in caller.events if e["type"] == "error"]
    finally:
        await caller.close()
    return stats


async def _steer(caller: Any, seed: int, sent_at: dict[int, float]) -> None:
    rng = random.Random(seed)
    event_id = 0
    while True:
        await asyncio.sleep(rng.uniform(0.3, 0.7))
        event_id += 1
        control = {"track": "action", "schema": "livegen.action.v1", "data": {"action": rng.choice(ACTIONS)}}
        sent_at[event_id] = time.monotonic()
        caller.send({"type": "world.event", "event_id": event_id, "controls": [control]})


async def _level(
    base_url: str, transport: str, sessions: int, seconds: float, warm_up: float, ask: int | None
) -> list[Any]:
    async def arrive(index: int) -> Any:
        await asyncio.sleep(index * ARRIVAL_GAP_S)
        if transport == "webrtc":
            return await play_call(base_url, seconds, warm_up, 100 + index, ask)
        ws_url = base_url.replace("http://", "ws://") + "/v1/worlds"
        page = Page(
            ws_url, pacing="realtime", ahead=1, ack_at="start", seed=100 + index, frames_per_chunk=ask
        )
        return await page.run(seconds, warm_up)

    return list(await asyncio.gather(*(arrive(i) for i in range(sessions))))


def _row(
    server: Any, base_url: str, transport: str, sessions: int, args: tuple[float, float, int | None]
) -> dict[str, Any]:
    seconds, warm_up, ask = args
    load_before = os.getloadavg()[0]
    cpu_before, wall_before = _cpu_seconds(server.pid), time.perf_counter()
    results = asyncio.run(_level(base_url, transport, sessions, seconds, warm_up, ask))
    cpu = _cpu_seconds(server.pid) - cpu_before
    elapsed = time.perf_counter() - wall_before
    counted_s = seconds - warm_up
    latencies = [ms for stats in results for ms in stats.latencies_ms]
    frames = sum(stats.frames for stats in results)
    # Sessions the frame-clock admission refused are counted, not averaged in.
    played = [stats for stats in results if "realtime_capacity" not in stats.errors] or results
    return {
        "transport": transport,
        "sessions": sessions,
        "refused": len(results) - len(played) if played is not results else len(results),
        "input_to_shown_p50_ms": _round(_percentile(latencies, 0.5)),
        "input_to_shown_p95_ms": _round(_percentile(latencies, 0.95)),
        "inputs_shown": len(latencies),
        "aiortc_decoded_p50_ms": _round(
            _percentile([ms for stats in results for ms in getattr(stats, "decoded_ms", ())], 0.5)
        ),
        "fps_median": round(statistics.median(stats.frames / counted_s for stats in played), 2),
        "bytes_per_s_per_session": round(statistics.median(stats.bytes / counted_s for stats in played)),
        # Over the whole run (warm-up included), against the frames counted after it: an upper bound.
        "server_cpu_ms_per_frame": _round(1000 * cpu / frames * counted_s / elapsed) if frames else None,
        "server_cpu_cores": round(cpu / elapsed, 2),
        "load_average": round((load_before + os.getloadavg()[0]) / 2, 2),
        "errors": sorted({code for stats in results for code in stats.errors}),
        "_samples": [s for stats in results if isinstance(stats, CallStats) for s in stats.samples],
    }


def encoder_cpu_ms_per_frame(frames: list[np.ndarray], codec: str, repeat: int = 4) -> float | None:
    """CPU milliseconds (all threads) aiortc's encoder takes for one frame, as the server's track
    hands them over: one at a time, at the frame clock's timestamps."""
    import av
    from aiortc import RTCRtpCodecParameters
    from aiortc.codecs import get_encoder

    if not frames:
        return None
    encoder = get_encoder(RTCRtpCodecParameters(mimeType=f"video/{codec}", clockRate=90_000, payloadType=96))
    sequence = [frame for _ in range(repeat) for frame in frames]
    started = time.process_time()
    for index, pixels in enumerate(sequence):
        video = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format="rgb24")
        video.pts, video.time_base = index * 5625, fractions.Fraction(1, 90_000)
        encoder.encode(video)
    return 1000 * (time.process_time() - started) / len(sequence)


def measure(
    model_name: str,
    levels: list[int],
    seconds: float,
    warm_up: float,
    ask: int | None,
    server_args: list[str],
    busy_neighbour: bool,
) -> dict[str, Any]:
    port = _free_port()
    neighbour = None
    if busy_neighbour:
        neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    server = start_server(model_name, port, server_args)
    base_url = f"http://127.0.0.1:{port}"
    try:
        rows = [
            _row(server, base_url, transport, n, (seconds, warm_up, ask))
            for n in levels
            for transport in ("websocket", "webrtc")
        ]
    finally:
        server.terminate()
        server.wait(timeout=30)
        if neighbour is not None:
            neighbour.terminate()
            with contextlib.suppress(Exception):
                neighbour.wait(timeout=5)
    samples = [s for row in rows for s in row.pop("_samples")][:64]
    return {
        "benchmark": "world-stream-webrtc",
        "model": model_name,
        "workload": {
            "seconds": seconds,
            "warm_up_s": warm_up,
            "session_frames_per_chunk": ask,
            "busy_neighbour": busy_neighbour,
            "cpus": os.cpu_count(),
        },
        "encoder_cpu_ms_per_frame": {
            codec: _round3(encoder_cpu_ms_per_frame(samples, codec)) for codec in ("VP8", "H264")
        },
        "frame_size": list(samples[0].shape) if samples else None,
        "rows": rows,
    }


def _round3(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def echo(result: dict[str, Any], say: Any) -> None:
    shape = result["frame_size"]
    encoders = ", ".join(f"{codec} {ms} ms" for codec, ms in result["encoder_cpu_ms_per_frame"].items())
    say(f"{result['model']}: encoder CPU per frame ({shape}): {encoders}")
    say(
        f"{'transport':>10}{'sessions':>9}{'refused':>8}{'p50 ms':>8}{'p95 ms':>8}{'inputs':>7}{'fps':>7}"
        f"{'B/s/session':>12}{'cpu ms/f':>9}{'cores':>6}{'load':>6}"
    )
    for row in result["rows"]:
        p50, p95 = row["input_to_shown_p50_ms"], row["input_to_shown_p95_ms"]
        cpu = row["server_cpu_ms_per_frame"]
        say(
            f"{row['transport']:>10}{row['sessions']:>9}{row['refused']:>8}{_fmt(p50):>8}{_fmt(p95):>8}{row['inputs_shown']:>7}"
            f"{row['fps_median']:>7.1f}{row['bytes_per_s_per_session']:>12}{_fmt(cpu):>9}"
            f"{row['server_cpu_cores']:>6.2f}{row['load_average']:>6.2f}"
            + (f"  errors: {row['errors']}" if row["errors"] else "")
        )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}" if value >= 10 else f"{value:.2f}"

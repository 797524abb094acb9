"""The cascade's speech service shared by a cluster's processes: one recogniser and one speech pool
for every process (``cluster/speech.py``), its failures and its restart."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import signal
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_harness as harness
import httpx
import pytest
import websockets
from cluster_harness import (
    OPENED,
    Cluster,
    RayNodes,
    audio_bytes,
    free_port,
    health,
    http,
    start_serve,
    stop,
    until,
    wait_for,
)

pytest.importorskip("ray")

close_clients = pytest.fixture(autouse=True)(harness.close_clients)
ray_nodes = pytest.fixture(scope="module")(harness.ray_nodes)


# --- the cascade's speech service: one recogniser and one speech pool for every process ----------

#: The question both processes hear, spoken in espeak-ng's voice by the cluster's own speech service.
QUESTION = "What is twelve times seven?"
USER_VOICE = "espeak:en-us+m2"


@pytest.fixture(scope="module")
def speech_cluster(ray_nodes: RayNodes) -> Iterator[Cluster]:
    """Two server processes of the cascade on the test's Ray cluster, sharing its speech service."""
    port = free_port()
    serve = start_serve(
        {"LIVEGEN_TTS_WORKERS": "1", "LIVEGEN_ASR_WORKERS": "1"},
        workers=2,
        port=port,
        ray_address=ray_nodes.address,
        voice_model="cascade",
        world_model="none",
        drain_timeout_s=1.0,
    )
    try:
        body = wait_for(port, lambda b: len(b["cluster"]["processes"]) >= 2, timeout=600)
        speech = Cluster(port, body["cluster"]["group"], serve)
        wait_for(port, lambda b: len(speech.processes()) == 2, 600)
        for process in speech.processes():  # each ready: its voice model loaded (or connected)
            wait_for(int(process["address"].rsplit(":", 1)[1]), lambda b: True, 600)
        yield speech
    finally:
        stop(serve)


def speech_service(body: dict[str, Any]) -> dict[str, Any]:
    services = [s for s in body["cluster"]["services"] if s["name"] == "livegen-speech"]
    return services[0] if services else {}


async def restarted(port: int) -> dict[str, Any]:
    """The /health of a process once the cluster's speech service is back after a restart (the
    process itself reports the failure it saw for a while: 503 is fine here)."""
    for _ in range(600):
        with contextlib.suppress(httpx.HTTPError, KeyError):
            body: dict[str, Any] = (await asyncio.to_thread(health, port)).json()
            if speech_service(body).get("restarted") and speech_service(body)["ready"]:
                return body
        await asyncio.sleep(1.0)
    raise AssertionError("the speech service did not come back")


def spoken(address: str, text: str) -> bytes:
    """``text`` as 24 kHz PCM16, said by the cluster's speech service through /v1/audio/speech."""
    body = {"model": "cascade", "input": text, "voice": USER_VOICE, "response_format": "pcm"}
    answer = httpx.post(f"{http(address)}/v1/audio/speech", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.content


def transcribed(address: str, pcm: bytes) -> dict[str, Any]:
    """OpenAI's transcription of ``pcm`` (24 kHz PCM16, sent as a WAV) by ``address``'s process."""
    wav = io.BytesIO()
    with wave.open(wav, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(24_000)
        writer.writeframes(pcm)
    files = {"file": ("question.wav", wav.getvalue(), "audio/wav")}
    data = {"model": "gpt-4o-transcribe", "response_format": "json", "include[]": "logprobs"}
    answer = httpx.post(f"{http(address)}/v1/audio/transcriptions", files=files, data=data, timeout=120)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def say(ws: Any, pcm: bytes) -> None:
    """Speech then 1.5 s of silence (server VAD ends the turn), in 100 ms appends."""
    audio = pcm + bytes(2 * 24_000 * 3 // 2)
    for start in range(0, len(audio), 4800):
        chunk = base64.b64encode(audio[start : start + 4800]).decode()
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))


def said(done: dict[str, Any]) -> str:
    parts = [part for item in done["response"]["output"] for part in item.get("content", [])]
    return " ".join(part.get("transcript") or part.get("text") or "" for part in parts)


async def spoken_turn(address: str, ws: Any, seen: list[dict[str, Any]]) -> dict[str, Any]:
    """A spoken question on ``ws``; the ``response.done`` of its answer."""
    await say(ws, await asyncio.to_thread(spoken, address, QUESTION))
    start = len(seen)
    while True:
        done = await until(ws, "response.done", seen)
        if done["response"]["status"] != "cancelled":  # a pause taken for the turn's end: not ours
            return {**done, "events": seen[start:]}


def descendants(roots: list[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def speech_workers(roots: list[int]) -> list[int]:
    """The Piper worker processes under ``roots``."""
    found = []
    for pid in descendants(roots):
        with contextlib.suppress(OSError):
            if b"livegen.models.cascade.tts_worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


async def test_two_processes_hear_and_answer_through_one_speech_service(
    speech_cluster: Cluster, ray_nodes: RayNodes
) -> None:
    processes = speech_cluster.processes()
    for process in processes:  # a spoken turn on each: heard, answered, spoken
        ws = await websockets.connect(f"{process['address']}/v1/realtime?model=cascade")
        OPENED.append(ws)
        seen: list[dict[str, Any]] = []
        await until(ws, "session.created", seen)
        done = await spoken_turn(process["address"], ws, seen)
        assert done["response"]["status"] == "completed", done
        assert "84" in said(done) or "eighty" in said(done).lower(), said(done)
        assert audio_bytes(done["events"]) > 24_000  # more than half a second of the answer's voice
    # A whole clip too (/v1/audio/transcriptions: recognised, scored and its tokens counted there).
    question = await asyncio.to_thread(spoken, processes[0]["address"], QUESTION)
    clip = await asyncio.to_thread(transcribed, processes[1]["address"], question)
    assert "12" in clip["text"] or "twelve" in clip["text"].lower(), clip
    assert clip["logprobs"] and all(entry["logprob"] <= 0 for entry in clip["logprobs"])  # scored there
    # One speech pool in the whole cluster (one worker: LIVEGEN_TTS_WORKERS=1), none in a server process.
    pids = [int(p["pid"]) for p in processes]
    assert len(speech_workers([speech_cluster.serve.pid, ray_nodes.process.pid])) == 1
    assert not speech_workers(pids)
    bodies = [health(int(p["address"].rsplit(":", 1)[1])).json() for p in processes]
    services = [speech_service(body) for body in bodies]
    assert services[0]["pid"] == services[1]["pid"]  # both name the same one
    assert services[0]["recognizers"] == ["whisper-tiny.en"]
    assert services[0]["calls"]["transcribe"] >= 2 and services[0]["calls"]["speak"] >= 4
    # Its load: both processes' decodes in its one queue, both processes' pieces in its one pool.
    load = services[0]["load"]
    assert load["asr_decodes"] >= 2 and load["asr_wait_p95_ms"] is not None, load
    assert load["speech_pieces"] >= 4 and load["speech_p95_ms"] > 0, load
    # One recogniser, in the service: the server processes' voice model is its view, without
    # workers of its own to report.
    for body in bodies:
        voice = body["services"]["voice"]
        assert "tts_workers" not in voice and voice["speech_service"]["ok"], voice
    assert services[0]["tts_workers"] == 1


def test_the_speech_service_sizes_its_recogniser_from_the_nodes_cores(speech_cluster: Cluster) -> None:
    """The actor asks Ray for one CPU (where to place it) and Ray sets OMP_NUM_THREADS=1 in it; its
    recogniser is sized from the cores it may run on, as a single server's is, not from that."""
    load = speech_service(health(speech_cluster.port).json())["load"]
    cores = len(os.sched_getaffinity(0))
    assert load["cores"] == cores, load
    # LIVEGEN_ASR_WORKERS=1 (the fixture): that one worker decodes on every core.
    assert load["asr"] == {"batch": 8, "workers": 1, "threads": cores}, load


async def test_the_speech_service_outlives_the_server_processes_that_die(speech_cluster: Cluster) -> None:
    before = speech_cluster.processes()
    service = speech_service(health(speech_cluster.port).json())
    for process in before:  # whichever created the service dies too
        os.kill(int(process["pid"]), signal.SIGKILL)
    tags = {p["tag"] for p in before}
    wait_for(
        speech_cluster.port,
        lambda b: len([p for p in speech_cluster.processes() if p["tag"] not in tags]) == 2,
    )
    for process in speech_cluster.processes():  # the supervisor's new processes, each ready
        wait_for(int(process["address"].rsplit(":", 1)[1]), lambda b: True, 600)
    again = speech_service(health(speech_cluster.port).json())
    assert again["pid"] == service["pid"] and not again["restarted"]  # the same service, never reloaded
    one = speech_cluster.processes()[0]
    ws = await websockets.connect(f"{one['address']}/v1/realtime?model=cascade")
    OPENED.append(ws)
    seen: list[dict[str, Any]] = []
    await until(ws, "session.created", seen)
    done = await spoken_turn(one["address"], ws, seen)
    assert done["response"]["status"] == "completed", done
    assert audio_bytes(done["events"]) > 24_000


async def test_a_service_killed_mid_answer_fails_that_response_and_the_next_is_answered(
    speech_cluster: Cluster,
) -> None:
    one = speech_cluster.processes()[0]
    port = int(one["address"].rsplit(":", 1)[1])
    service = speech_service(health(port).json())
    ws = await websockets.connect(f"{one['address']}/v1/realtime?model=cascade")
    OPENED.append(ws)
    seen: list[dict[str, Any]] = []
    await until(ws, "session.created", seen)
    long = " ".join(f"This is sentence number {n} of a long answer." for n in range(1, 13))
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": f"repeat after me {long}"}],
    }
    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    await ws.send(json.dumps({"type": "response.create"}))
    await until(ws, "response.output_audio.delta", seen)
    os.kill(service["pid"], signal.SIGKILL)  # the service's process dies mid-answer
    done = await until(ws, "response.done", seen)
    assert done["response"]["status"] == "failed", done
    assert done["response"]["status_details"]["error"]["code"] == "speech_service_unavailable"
    # Ray restarts it (it loads its models again); the same session's next turn is heard and answered.
    back = await restarted(port)
    assert speech_service(back)["pid"] != service["pid"]
    answer = await spoken_turn(one["address"], ws, seen)
    assert answer["response"]["status"] == "completed", answer
    assert "84" in said(answer) or "eighty" in said(answer).lower(), said(answer)
    assert audio_bytes(answer["events"]) > 24_000


async def test_a_stopped_service_is_seen_on_health_and_its_calls_fail_at_once(
    speech_cluster: Cluster,
) -> None:
    """A service whose process is stopped (SIGSTOP) fails no call by itself: before, ``/health``
    stayed 200 and named the voice model ready while every recognition or speech call hung. Now
    each process's heartbeat notices within seconds: 503, why, and calls refused at once."""
    ports = [int(p["address"].rsplit(":", 1)[1]) for p in speech_cluster.processes()]
    pid = int(speech_service(health(ports[0]).json())["pid"])
    os.kill(pid, signal.SIGSTOP)
    try:
        for port in ports:  # each process sees it on its own
            voice = (await stopped_health(port))["services"]["voice"]
            assert voice["ready"] is False and "stopped answering" in voice["reason"], voice
            assert voice["speech_service"]["ok"] is False
        body = {"model": "cascade", "input": "Are you there?", "voice": USER_VOICE, "response_format": "pcm"}
        async with httpx.AsyncClient(timeout=30) as client:  # refused, never left waiting
            answer = await client.post(f"http://127.0.0.1:{ports[0]}/v1/audio/speech", json=body)
        assert answer.status_code >= 500 and "stopped answering" in answer.text, answer.text
    finally:
        os.kill(pid, signal.SIGCONT)
    for port in ports:  # the next heartbeat answered: ready again, without a restart
        wait_for(port, lambda b: True, 60)
    assert int(speech_service(health(ports[0]).json())["pid"]) == pid


async def stopped_health(port: int) -> dict[str, Any]:
    """A process's ``/health`` once it answers 503 (its heartbeat went unanswered)."""
    for _ in range(120):
        answer = await asyncio.to_thread(health, port)
        if answer.status_code == 503:
            return dict(answer.json())
        await asyncio.sleep(0.25)
    raise AssertionError("the stopped service was never seen on /health")

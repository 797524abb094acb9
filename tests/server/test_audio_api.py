"""``/v1/audio/transcriptions`` and ``/v1/audio/speech`` over the wire: formats, streaming, limits, errors.

Raw HTTP (httpx), so every status, header and error body is what a client
gets. Speech is made by espeak-ng apart from the server (``browser/speech``)
and encoded here by PyAV into each upload format; the server runs the real
embedded models (``slow``), but for readiness and refusals that need none.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import random
import socket
import time
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
import pytest
import websockets
from openai import OpenAI

from browser.speech import write_speech
from livegen.bench.fuzz_uploads import nested_opens, upload_cases
from livegen.server import ServerConfig
from livegen.server.thread import ServerThread
from voice.scripted import SlowLoadingVoice, registry, slow_registry

KEY = "audio-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SAID = "Seven green bottles are standing on the kitchen table."
#: Ten sentences: a server that synthesised them all before sending would have all ten done.
LONG_TEXT = " ".join(
    f"This is sentence number {n}, spoken to see the audio stream."
    for n in (["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"])
)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = ServerThread(ServerConfig(api_key=KEY, world_model="none", max_audio_requests=2)).start()
    try:
        running.wait_ready(timeout=300)
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def spoken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_speech(tmp_path_factory.mktemp("audio") / "said.wav", [(0.3, SAID)], tail_s=0.5)


def transcribe(server: ServerThread, file: tuple[str, bytes], **fields: Any) -> httpx.Response:
    data = {"model": "whisper-1", **fields}
    return httpx.post(
        f"{server.http_url}/v1/audio/transcriptions",
        headers=AUTH,
        data=data,
        files={"file": file},
        timeout=120,
    )


def speak(server: ServerThread, **body: Any) -> httpx.Response:
    body = {"model": "tts-1", "voice": "alloy", "input": "Hello there.", **body}
    return httpx.post(f"{server.http_url}/v1/audio/speech", headers=AUTH, json=body, timeout=120)


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def encoded(path: Path, container: str, codec: str, rate: int) -> bytes:
    """The WAV at ``path`` re-encoded by PyAV: an upload as a phone or a browser makes one."""
    out = io.BytesIO()
    with av.open(str(path)) as source, av.open(out, "w", format=container) as target:
        stream = target.add_stream(codec, rate=rate, layout="mono")
        resampler = av.AudioResampler(format=stream.format, layout="mono", rate=rate)
        for frame in source.decode(audio=0):
            for part in resampler.resample(frame):
                target.mux(stream.encode(part))
        target.mux(stream.encode(None))
    return out.getvalue()


# -- transcriptions ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "container", "codec", "rate"),
    [
        ("said.mp3", "mp3", "libmp3lame", 16_000),
        ("said.flac", "flac", "flac", 44_100),
        ("said.ogg", "ogg", "libopus", 48_000),
        ("said.webm", "webm", "libopus", 48_000),
        ("said.m4a", "ipod", "aac", 24_000),
    ],
)
def test_uploads_in_each_format_are_heard(
    server: ServerThread, spoken: Path, name: str, container: str, codec: str, rate: int
) -> None:
    response = transcribe(server, (name, encoded(spoken, container, codec, rate)), response_format="text")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    heard = response.text.lower()
    assert "green" in heard and "kitchen" in heard, heard


@pytest.mark.slow
def test_subtitles_logprobs_and_a_named_recogniser(server: ServerThread, spoken: Path) -> None:
    file = ("said.wav", spoken.read_bytes())
    srt = transcribe(server, file, model="whisper-base", response_format="srt", language="en")
    assert srt.status_code == 200, srt.text
    first = srt.text.splitlines()
    assert (
        first[0] == "1" and first[1].startswith("00:00:00,000 --> 00:00:0") and "kitchen" in first[2].lower()
    )
    vtt = transcribe(server, file, model="whisper-tiny.en", response_format="vtt", prompt="kitchen " * 500)
    assert vtt.status_code == 200, vtt.text
    assert vtt.text.startswith("WEBVTT\n\n00:00:00.000 --> ") and "kitchen" in vtt.text.lower()
    scored = transcribe(server, file, model="gpt-4o-transcribe", **{"include[]": "logprobs"}).json()
    assert "".join(entry["token"] for entry in scored["logprobs"]).strip() == scored["text"]


@pytest.mark.slow
def test_a_long_clip_is_heard_in_timed_segments(server: ServerThread, tmp_path: Path) -> None:
    parts = [(0.5, "The first part is about apples."), (29.0, "The second part is about the weather.")]
    data = write_speech(tmp_path / "long.wav", parts, tail_s=1.0).read_bytes()
    assert len(data) > 1024 * 1024  # over a MiB: uploads are bounded by --max-audio-bytes alone
    response = transcribe(server, ("long.wav", data), response_format="verbose_json")
    assert response.status_code == 200, response.text
    verbose = response.json()
    segments = verbose["segments"]
    assert len(segments) == 2, segments
    assert "apples" in segments[0]["text"].lower() and "weather" in segments[1]["text"].lower()
    assert segments[0]["start"] == 0.0 and 25.0 < segments[0]["end"] == segments[1]["start"] <= 30.0
    assert segments[1]["end"] == pytest.approx(verbose["duration"], abs=0.01) and verbose["duration"] > 30


@pytest.mark.slow
def test_bad_uploads_get_openai_errors(server: ServerThread, spoken: Path) -> None:
    wav = ("said.wav", spoken.read_bytes())
    garbage = error_of(transcribe(server, ("said.mp3", b"not audio at all" * 100)), 400)
    assert garbage["param"] == "file" and garbage["message"].startswith("Invalid file format.")
    no_file = httpx.post(
        f"{server.http_url}/v1/audio/transcriptions", headers=AUTH, data={"model": "whisper-1"}
    )
    assert error_of(no_file, 400) == {
        "message": "Missing required parameter: 'file'.",
        "type": "invalid_request_error",
        "param": "file",
        "code": "missing_required_parameter",
    }
    bad_format = error_of(transcribe(server, wav, response_format="xml"), 400)
    assert bad_format["param"] == "response_format" and "'xml'" in bad_format["message"]
    assert error_of(transcribe(server, wav, temperature="7"), 400)["param"] == "temperature"
    assert error_of(transcribe(server, wav, language="english!"), 400)["param"] == "language"
    unknown = error_of(transcribe(server, wav, model="whisper-9"), 404)
    assert unknown["code"] == "model_not_found" and "whisper-9" in unknown["message"]
    words = error_of(transcribe(server, wav, **{"timestamp_granularities[]": "word"}), 400)
    assert words["param"] == "timestamp_granularities"
    verbose_logprobs = {"include[]": "logprobs", "response_format": "verbose_json"}
    assert error_of(transcribe(server, wav, **verbose_logprobs), 400)["param"] == "include"
    assert error_of(transcribe(server, wav, **{"include[]": "words"}), 400)["param"] == "include"


@pytest.mark.slow
def test_the_body_and_duration_caps(start_server: Callable[..., ServerThread], spoken: Path) -> None:
    small = start_server(api_key=KEY, world_model="none", max_audio_bytes=256 * 1024, max_audio_s=1.0)
    small.wait_ready(timeout=300)
    big = error_of(transcribe(small, ("big.wav", bytes(300 * 1024))), 413)
    assert big["code"] == "request_too_large" and "262144" in big["message"]
    long = error_of(transcribe(small, ("said.wav", spoken.read_bytes())), 400)  # 3.9 s in 170 KiB
    assert long["param"] == "file" and "at most 1 s" in long["message"]
    # A chunked upload has no Content-Length: the cap is counted as the body arrives.
    head = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
    chunks = iter([head, *[bytes(64 * 1024)] * 5])
    chunked = httpx.post(
        f"{small.http_url}/v1/audio/transcriptions",
        headers={**AUTH, "Content-Type": "multipart/form-data; boundary=b"},
        content=chunks,
    )
    assert error_of(chunked, 413)["code"] == "request_too_large"


@pytest.mark.slow
def test_uploads_never_open_the_servers_files(
    server: ServerThread, spoken: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The spoken WAV lies in the server's working directory (the server runs in this process).
    private = tmp_path / "voicemail.wav"
    private.write_bytes(spoken.read_bytes())
    monkeypatch.chdir(tmp_path)
    for name, upload in nested_opens(private).items():
        response = transcribe(server, (name, upload), response_format="json")
        assert "kitchen" not in response.text.lower(), (name, response.text)  # the file's words
        error = error_of(response, 400)
        assert (error["code"], error["param"]) == ("invalid_value", "file"), (name, error)
        assert error["message"].startswith("Invalid file format."), (name, error)
    # The route still hears a real upload of the same words.
    assert "kitchen" in transcribe(server, ("said.wav", private.read_bytes())).json()["text"].lower()


@pytest.mark.slow
def test_a_fuzz_of_hostile_uploads_gets_200_or_400_file(
    server: ServerThread,
    spoken: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    private = tmp_path / "voicemail.wav"
    private.write_bytes(spoken.read_bytes())
    monkeypatch.chdir(tmp_path)
    answered: dict[int, int] = {}
    for name, upload in upload_cases(random.Random(37), 120, private):
        response = transcribe(server, (name, upload))
        answered[response.status_code] = answered.get(response.status_code, 0) + 1
        assert "kitchen" not in response.text.lower(), (name, upload[:64])
        if response.status_code != 200:
            error = error_of(response, 400)
            assert (error["code"], error["param"]) == ("invalid_value", "file"), (name, upload[:64], error)
    assert set(answered) == {200, 400}, answered  # both families reached: some decode, most do not
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert httpx.get(f"{server.http_url}/health").status_code == 200


def wav_at(rate: int, num_bytes: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1), writer.setsampwidth(2), writer.setframerate(rate)
        writer.writeframes(bytes(num_bytes))
    return out.getvalue()


@pytest.mark.slow
def test_sample_rates_outside_8_to_192_khz_are_refused(server: ServerThread) -> None:
    # 3 KB claiming 1 Hz: 25 minutes of audio that would cost minutes of CPU to resample (issue 37, 6).
    for rate in (1, 7_999, 192_001):
        error = error_of(transcribe(server, (f"r{rate}.wav", wav_at(rate, 3_000))), 400)
        assert (error["code"], error["param"]) == ("invalid_value", "file"), error
        assert f"{rate} Hz" in error["message"]
    assert transcribe(server, ("r8000.wav", wav_at(8_000, 16_000))).status_code == 200


#: Every transcription model name OpenAI's SDK documents, with dated forms: a client's default
#: (pipecat 1.14 asks for ``gpt-realtime-whisper``) is the server's recogniser (issue 37, item 14).
OPENAI_NAMES = (
    "whisper-1", "gpt-4o-transcribe", "gpt-4o-transcribe-diarize", "gpt-4o-mini-transcribe",
    "gpt-4o-mini-transcribe-2025-03-20", "gpt-4o-mini-transcribe-2025-12-15", "gpt-realtime-whisper",
    "gpt-transcribe", "gpt-transcribe-2026-01-15", "gpt-live-transcribe",
)  # fmt: skip


@pytest.mark.slow
def test_every_openai_transcription_name_is_the_routes_recogniser(server: ServerThread, spoken: Path) -> None:
    for name in OPENAI_NAMES:
        heard = transcribe(server, ("said.wav", spoken.read_bytes()), model=name)
        assert heard.status_code == 200 and "kitchen" in heard.json()["text"].lower(), (name, heard.text)
    for unknown in ("whisper-9", "gpt-realtime-whisper-2025", "gpt-4o-transcribe-1999-01-01x"):
        assert error_of(transcribe(server, ("said.wav", b""), model=unknown), 404)["param"] == "model"


@pytest.mark.slow
async def test_every_openai_transcription_name_is_a_sessions_recogniser(server: ServerThread) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with websockets.connect(f"{server.ws_url}/v1/realtime", additional_headers=headers) as ws:
        for name in (*OPENAI_NAMES, "whisper-huge"):
            update = {"type": "realtime", "audio": {"input": {"transcription": {"model": name}}}}
            await ws.send(json.dumps({"type": "session.update", "session": update}))
            answer = await next_of(ws, ("session.updated", "error"))
            if name == "whisper-huge":  # neither OpenAI's nor the server's: still refused by name
                assert answer["error"]["param"] == "session.audio.input.transcription.model", answer
            else:
                assert answer["type"] == "session.updated", (name, answer)
                assert answer["session"]["audio"]["input"]["transcription"]["model"] == name


async def next_of(ws: Any, kinds: tuple[str, ...]) -> dict[str, Any]:
    while True:
        event: dict[str, Any] = json.loads(await ws.recv())
        if event["type"] in kinds:
            return event


# -- speech -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_speech_streams_its_first_bytes_before_the_rest_is_spoken(server: ServerThread) -> None:
    pool = cascade(server).worker
    body = {"model": "gpt-4o-mini-tts", "voice": "nova", "input": LONG_TEXT, "response_format": "pcm"}
    chunks: list[bytes] = []
    with httpx.stream(
        "POST", f"{server.http_url}/v1/audio/speech", headers=AUTH, json=body, timeout=120
    ) as response:
        assert response.status_code == 200 and response.headers["content-type"] == "audio/pcm"
        before = pool.num_parts
        for chunk in response.iter_raw():
            if not chunks:
                parts_at_first_byte = pool.num_parts - before
            chunks.append(chunk)
    pcm = np.frombuffer(b"".join(chunks), "<i2")
    assert parts_at_first_byte < 10  # ten sentences: the first bytes left before the last was spoken
    assert 10.0 < len(pcm) / 24_000 < 60.0
    assert np.sqrt(np.mean(pcm.astype(np.float64) ** 2)) > 300


@pytest.mark.slow
def test_speech_formats_and_server_sent_events(server: ServerThread) -> None:
    for response_format, magic in [
        ("mp3", (b"ID3", b"\xff\xf3", b"\xff\xfb")),
        ("opus", (b"OggS",)),
        ("flac", (b"fLaC",)),
    ]:
        response = speak(server, response_format=response_format, input="One, two, three.")
        assert response.status_code == 200, response.text
        assert response.content.startswith(magic), (response_format, response.content[:8])
        with av.open(io.BytesIO(response.content)) as decoded:
            seconds = sum(frame.samples / frame.sample_rate for frame in decoded.decode(audio=0))
        assert 0.5 < seconds < 5.0
    sse = speak(server, stream_format="sse", response_format="pcm", input="Hello there. How are you?")
    assert sse.status_code == 200 and sse.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in sse.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events][-1] == "speech.audio.done"
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert len(pcm) / 48_000 > 0.8


@pytest.mark.slow
def test_speech_voices_speed_and_refusals(server: ServerThread) -> None:
    normal = speak(server, response_format="pcm", input="Counting slowly to five.")
    fast = speak(server, response_format="pcm", input="Counting slowly to five.", speed=2.0)
    assert len(fast.content) < 0.75 * len(normal.content)
    espeak = speak(server, voice="espeak:en-us+m2", response_format="wav")
    assert espeak.status_code == 200 and espeak.content.startswith(b"RIFF")
    with_id = speak(server, voice={"id": "ash"}, response_format="pcm")
    assert with_id.status_code == 200
    unknown_voice = error_of(speak(server, voice="bob"), 400)
    assert unknown_voice["param"] == "voice" and unknown_voice["message"].startswith("Invalid value: 'bob'.")
    bad_espeak = error_of(speak(server, voice="espeak:zz-nope"), 400)
    assert bad_espeak["param"] == "voice" and "zz-nope" in bad_espeak["message"]
    assert error_of(speak(server, model="tts-9"), 404)["message"] == (
        "The model `tts-9` does not exist or you do not have access to it."
    )
    assert speak(server, model="cascade", response_format="pcm").status_code == 200  # livegen's own name
    too_long = error_of(speak(server, input="a" * 4097), 400)
    assert too_long["param"] == "input"
    assert error_of(speak(server, input=""), 400)["code"] == "missing_required_parameter"
    assert error_of(speak(server, speed=9), 400)["param"] == "speed"
    assert error_of(speak(server, response_format="ogg"), 400)["param"] == "response_format"
    assert error_of(speak(server, stream_format="chunks"), 400)["param"] == "stream_format"
    not_json = httpx.post(f"{server.http_url}/v1/audio/speech", headers=AUTH, content=b"{", timeout=30)
    assert error_of(not_json, 400)["type"] == "invalid_request_error"
    # Nested deeper than the parser's recursion: a 400 as any bad JSON, never a 500 (issue 30, item 13).
    deep = httpx.post(f"{server.http_url}/v1/audio/speech", headers=AUTH, content=b"[" * 20_000, timeout=30)
    assert error_of(deep, 400)["type"] == "invalid_request_error"
    # The body is bounded where it arrives (server/http/bodies.py), as every route's.
    huge = httpx.post(f"{server.http_url}/v1/audio/speech", headers=AUTH, content=b" " * 70_000, timeout=30)
    assert error_of(huge, 413)["code"] == "request_too_large"


@pytest.mark.slow
def test_requests_past_the_bound_get_429_and_are_counted(server: ServerThread) -> None:
    body = {"model": "tts-1", "voice": "alloy", "input": LONG_TEXT, "response_format": "pcm"}
    url = f"{server.http_url}/v1/audio/speech"
    with httpx.Client(headers=AUTH, timeout=120) as first, httpx.Client(headers=AUTH, timeout=120) as second:
        with first.stream("POST", url, json=body) as one, second.stream("POST", url, json=body) as two:
            assert one.status_code == two.status_code == 200  # --max-audio-requests 2, held while streaming
            third = error_of(speak(server), 429)
            assert third["code"] == "rate_limit_exceeded"
        # Both streams closed early: their slots are free again.
        assert speak(server, response_format="pcm").status_code == 200
    metrics = httpx.get(f"{server.http_url}/metrics", headers=AUTH).text
    assert 'livegen_audio_requests_total{code="429",route="speech"} 1.0' in metrics
    assert 'livegen_audio_requests_total{code="200",route="speech"}' in metrics


@pytest.mark.slow
def test_a_client_gone_mid_upload_frees_its_slot(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    head = (
        "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: multipart/form-data; boundary=b\r\n"
        "Content-Length: 1000000\r\n\r\n"
        '--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
    )
    for _ in range(3):  # more than --max-audio-requests (2): each left its slot behind, or none did
        with socket.create_connection(("127.0.0.1", server.port)) as gone:
            gone.sendall(head.encode() + bytes(10_000))
        time.sleep(0.2)  # for the server to read the close, not a timing assertion
    assert speak(server, response_format="pcm").status_code == 200
    assert not [r for r in caplog.records if r.exc_info], "a traceback for a client that left"


@pytest.mark.slow
def test_slow_uploads_do_not_hold_the_models_slots(server: ServerThread) -> None:
    head = (
        "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: multipart/form-data; boundary=b\r\n"
        "Content-Length: 1000000\r\n\r\n"
        '--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
    )
    uploading = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]
    try:
        for upload in uploading:  # three uploads under way, more than --max-audio-requests (2)
            upload.sendall(head.encode() + bytes(10_000))
        assert speak(server, response_format="pcm").status_code == 200
    finally:
        for upload in uploading:
            upload.close()


@pytest.mark.slow
def test_both_routes_need_the_key(server: ServerThread, spoken: Path) -> None:
    no_key = httpx.post(
        f"{server.http_url}/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "x"}
    )
    assert error_of(no_key, 401)["code"] == "invalid_api_key"
    wrong = httpx.post(
        f"{server.http_url}/v1/audio/transcriptions",
        headers={"Authorization": "Bearer nope"},
        data={"model": "whisper-1"},
        files={"file": ("said.wav", spoken.read_bytes())},
    )
    assert error_of(wrong, 401)["type"] == "authentication_error"


@pytest.mark.slow
def test_one_livegen_is_anothers_voice_and_recogniser(
    server: ServerThread, start_server: Callable[..., ServerThread]
) -> None:
    other = start_server(world_model="none")  # no key: a second server, as a user would run one
    other.wait_ready(timeout=300)
    voice = OpenAI(api_key=KEY, base_url=f"{server.http_url}/v1")
    recogniser = OpenAI(api_key="unused", base_url=f"{other.http_url}/v1")
    with voice, recogniser:
        said = voice.audio.speech.create(model="tts-1", voice="echo", input="Please water the tomato plants.")
        heard = recogniser.audio.transcriptions.create(model="whisper-1", file=("said.mp3", said.content))
    assert {"water", "tomato"} <= {word.strip(".,").lower() for word in heard.text.split()}, heard.text


# -- without the real models ------------------------------------------------------------------------


def test_503_while_the_voice_model_loads_then_404_for_a_model_without_clips(
    start_server: Callable[..., ServerThread],
) -> None:
    SlowLoadingVoice.release.clear()
    try:
        loading = start_server(registry=slow_registry(), voice_model="slow-voice", world_model="none")
        response = httpx.post(
            f"{loading.http_url}/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "x"}
        )
        error = error_of(response, 503)
        assert error["code"] == "model_not_ready" and response.headers["retry-after"] == "5"
    finally:
        SlowLoadingVoice.release.set()
    scripted = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    scripted.wait_ready(timeout=30)
    sessions_only = httpx.post(
        f"{scripted.http_url}/v1/audio/transcriptions",
        data={"model": "whisper-1"},
        files={"file": ("a.wav", b"")},
    )
    assert "serves sessions only" in error_of(sessions_only, 404)["message"]


def cascade(server: ServerThread) -> Any:
    service = next(s for s in server.app.state.livegen.services if s.name == "voice")
    return service.engine.models[service.engine.default_model]


def _duration(path: Path) -> float:
    with wave.open(str(path)) as reader:
        return reader.getnframes() / reader.getframerate()

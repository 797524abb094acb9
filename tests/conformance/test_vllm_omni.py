"""vllm-omni's own ``DuplexClient`` (0.30.0), unchanged, against the real livegen server.

The client module is loaded from the files of the wheel published on PyPI
(fetched once with pip into ``~/.cache/livegen/vllm-omni``, as ``livegen bench
world-session`` does; vllm itself is not installed): ``vllm_omni.clients`` is
an empty package here, and ``clients/duplex.py`` and ``clients/utils.py`` are
executed as they are. The client speaks vllm-omni's duplex dialect
(``/v1/realtime?duplex=1``, ``protocol/realtime/duplex.py``) with its stock settings:
16 kHz input, ``turn_detection: null``, ``extra_body.auto_response``, a
heartbeat, event acks and transparent resume. The server runs the scripted
test model, which transcribes a turn as the milliseconds of audio it heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sys
import types
import zipfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import websockets

from conformance.support import until
from livegen.bench.world_session import CACHE, VLLM_OMNI_VERSION, _download
from livegen.server.thread import ServerThread
from voice.scripted import ScriptedVoice, registry, tone

CLIENT = f"vllm-omni DuplexClient {VLLM_OMNI_VERSION}"
MODULES = ("utils", "duplex")


def load_client(cache: Path = CACHE) -> types.ModuleType:
    """``vllm_omni.clients.duplex`` from the wheel's files, unchanged."""
    folder = cache / VLLM_OMNI_VERSION / "clients"
    files = {name: folder / f"{name}.py" for name in MODULES}
    if not all(path.exists() for path in files.values()):
        folder.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(_download(cache)) as archive:
            for name, path in files.items():
                path.write_bytes(archive.read(f"vllm_omni/clients/{name}.py"))
    for name in ("vllm_omni", "vllm_omni.clients"):
        shim = sys.modules.setdefault(name, types.ModuleType(name))
        shim.__path__ = []  # a package with nothing in it: only the client's own files load
    for name, path in files.items():
        spec = importlib.util.spec_from_file_location(f"vllm_omni.clients.{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["vllm_omni.clients.duplex"]


vo = load_client()


def conformance(capability: str) -> pytest.MarkDecorator:
    return pytest.mark.conformance(client=CLIENT, capability=capability)


@pytest.fixture
def server(start_server: Callable[..., ServerThread]) -> ServerThread:
    running = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    running.wait_ready(timeout=30)
    return running


def model_of(server: ServerThread) -> ScriptedVoice:
    service = next(s for s in server.app.state.livegen.services if s.name == "voice")
    model: ScriptedVoice = service.engine.models["scripted-voice"]
    return model


class Connections:
    """The client's ``connect`` hook (a constructor parameter): plain ``websockets``, remembered,
    so that a test can cut one as a network would."""

    def __init__(self) -> None:
        self.opened: list[Any] = []

    async def __call__(self, url: str) -> Any:
        ws = await websockets.connect(url, max_size=64 << 20)
        self.opened.append(ws)
        return ws


@contextlib.asynccontextmanager
async def connected(server: ServerThread, **options: Any) -> AsyncIterator[tuple[Any, Any]]:
    """A stock ``DuplexClient`` (and its own ``EventCollector``) on the server."""
    client = vo.DuplexClient(server.ws_url, model="scripted-voice", **options)
    collector = vo.EventCollector()
    async with client:
        consumer = asyncio.create_task(collector.consume(client))
        yield client, collector
    await asyncio.wait_for(consumer, 10)


async def answer(client: Any) -> Any:
    """The next response, played to its end with the client's own playback acks."""
    async for response in client.responses():
        async for _chunk in response.audio():
            await client.ack_playback(response.played_ms, response_id=response.response_id)
        await response.wait(20)
        return response
    raise AssertionError("the session ended before a response")


async def text_turn(client: Any, text: str) -> Any:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await client.send({"type": "conversation.item.create", "item": item})
    await client.send({"type": "response.create"})
    return await asyncio.wait_for(answer(client), 30)


def transcripts(collector: Any) -> list[str]:
    kind = "conversation.item.input_audio_transcription.completed"
    return [str(e["transcript"]) for e in collector.events if e["type"] == kind]


@conformance("spoken-turn")
async def test_a_spoken_turn_at_16_khz_is_heard_whole_and_answered_after_the_commit(
    server: ServerThread,
) -> None:
    async with connected(server) as (client, collector):
        assert client.session_info["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 16_000}
        await client.stream_pcm(tone(1000, 16_000), realtime=False)
        await client.commit()  # turn_detection null + auto_response: the commit starts the answer
        response = await asyncio.wait_for(answer(client), 30)
        assert response.decision == "speak" and response.transcript == "hello from livegen"
        assert response.done_event.raw["response"]["status"] == "completed"
        assert round(response.played_ms) == model_of(server).script.reply_ms
    assert transcripts(collector) == ["1000 ms"]  # 16 kHz read as 16 kHz: all of it, no more
    assert collector.errors() == []


@conformance("text-turn")
async def test_a_text_turn_with_heartbeats_going(server: ServerThread) -> None:
    async with connected(server, heartbeat_interval_s=0.05) as (client, collector):
        await asyncio.sleep(0.5)  # several of the client's own heartbeats
        response = await text_turn(client, "hello")
        assert response.decision == "speak" and response.transcript == "hello from livegen"
    assert collector.errors() == []


@conformance("unknown-item")
async def test_unknown_item_ids_are_refused_to_the_request_and_the_session_goes_on(
    server: ServerThread,
) -> None:
    async with connected(server) as (client, collector):
        for kind in ("conversation.item.retrieve", "conversation.item.delete"):
            sent = await client.send({"type": kind, "item_id": "item_nope"})
            with pytest.raises(vo.DuplexProtocolError) as refused:
                await client.wait_for(kind + "d", timeout_s=10)  # ...retrieved, ...deleted
            assert refused.value.event_id == sent
            assert refused.value.code == f"item_{kind.split('.')[-1]}_invalid_item_id"  # OpenAI's
        with pytest.raises(vo.DuplexProtocolError):  # the same errors, once each, on the response path
            await asyncio.wait_for(answer(client), 10)
        with pytest.raises(vo.DuplexProtocolError):
            await asyncio.wait_for(answer(client), 10)
        assert (await text_turn(client, "still there?")).decision == "speak"
    assert len(collector.errors()) == 2


@conformance("idle-cancel")
async def test_a_cancel_with_nothing_running_is_one_error_and_the_session_goes_on(
    server: ServerThread,
) -> None:
    async with connected(server) as (client, collector):
        await client.cancel_response()
        with pytest.raises(vo.DuplexProtocolError) as refused:
            await asyncio.wait_for(answer(client), 10)
        assert refused.value.code == "response_cancel_not_active"
        assert (await text_turn(client, "hello")).decision == "speak"
    assert [e["error"]["code"] for e in collector.errors()] == ["response_cancel_not_active"]


@conformance("barge-in")
async def test_a_client_forced_barge_in_cancels_the_answer_and_the_next_turn_is_answered(
    server: ServerThread,
) -> None:
    model_of(server).script.reply_ms = 20_000
    async with connected(server) as (client, collector):
        await client.stream_pcm(tone(500, 16_000), realtime=False)
        await client.commit()
        async for response in client.responses():
            async for _chunk in response.audio():
                # The user cuts in: the client's barge-in (cancel_response + clear_input).
                await client.cancel_response(response.response_id)
                await client.clear_input()
                break
            await response.wait(20)
            assert response.done_event.raw["response"]["status"] == "cancelled"
            break
        model_of(server).script.reply_ms = 300
        await client.stream_pcm(tone(700, 16_000), realtime=False)
        await client.commit()
        assert (await asyncio.wait_for(answer(client), 30)).decision == "speak"
    assert transcripts(collector) == ["500 ms", "700 ms"]
    assert collector.errors() == []


@conformance("resume")
async def test_a_cut_connection_is_resumed_by_the_client_with_nothing_lost_or_repeated(
    server: ServerThread,
) -> None:
    model_of(server).script.reply_ms = 3000
    connections = Connections()
    async with connected(server, connect=connections) as (client, collector):
        await client.stream_pcm(tone(400, 16_000), realtime=False)
        await client.commit()
        async for response in client.responses():
            async for _chunk in response.audio():
                if len(connections.opened) == 1 and response.played_ms >= 500:
                    connections.opened[0].transport.abort()  # the network drops: no close frame
                await client.ack_playback(response.played_ms, response_id=response.response_id)
            await response.wait(20)
            assert response.done_event.raw["response"]["status"] == "completed"
            break
        assert len(connections.opened) == 2  # the client reconnected and resumed by itself
        assert any(e["type"] == "connection.resumed" for e in collector.events)
        assert (await text_turn(client, "still there?")).decision == "speak"
        seqs = [e["server_event_seq"] for e in collector.events if "server_event_seq" in e]
        # Every event once, in order (seq 1, session.created, came before the collector started).
        assert seqs == list(range(2, len(seqs) + 2))
        service = next(s for s in server.app.state.livegen.services if s.name == "voice")
        attachment = service.engine.live[client.session_id].attachment
        # The client's acks let the journal forget (its acks of the last events may still be in flight).
        await until(lambda: attachment.oldest_seq > seqs[-1] - 5, within=10, what="the journal trimmed")
    first_response = collector.response_ids[0]
    assert len(collector.audio_bytes(first_response)) == 3000 * 48  # 3 s at 24 kHz, no gap, no repeat
    assert collector.errors() == []


@conformance("spoken-turn")
async def test_a_session_setting_livegen_cannot_honour_is_refused_at_the_handshake(
    server: ServerThread,
) -> None:
    config = vo.SessionConfig(ref_audio=vo.audio_data_url(b"RIFF"), temperature=0.7)
    with pytest.raises(vo.DuplexProtocolError) as refused:
        async with vo.DuplexClient(server.ws_url, model="scripted-voice", config=config):
            pass
    assert (refused.value.code, refused.value.raw["error"]["param"]) == (
        "unsupported_parameter",
        "session.ref_audio",
    )

"""OpenAI's model names and error words on the wire, through a real server.

Clients carry the vendor's realtime model names as defaults (pipecat 1.14:
``gpt-realtime-2.1``) and match errors by code and message (pipecat: a
retrieve fails only on ``item_retrieve_invalid_item_id``; LiveKit drops only
"Cancellation failed: no active response found"). The server runs the
scripted test model; clients are raw WebSockets and the official SDK.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import websockets
from openai import AsyncOpenAI

from livegen.server.thread import ServerThread
from voice.scripted import registry

OPENAI_NAMES = [
    "gpt-realtime-2.1",  # pipecat 1.14's default
    "gpt-realtime",
    "gpt-realtime-mini",
    "gpt-realtime-2025-08-28",
    "gpt-4o-realtime-preview",
    "gpt-4o-realtime-preview-2024-12-17",
    "gpt-4o-mini-realtime-preview",
    "gpt-4o-mini-realtime-preview-2024-12-17",
]


@pytest.fixture
def voice_server(start_server: Callable[..., ServerThread]) -> ServerThread:
    server = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    server.wait_ready(timeout=30)
    return server


async def first_event(server: ServerThread, model: str) -> tuple[dict[str, Any], Any]:
    """The first event of a connection asking for ``model``, and how the socket ended (None: open)."""
    async with websockets.connect(f"{server.ws_url}/v1/realtime?model={model}") as ws:
        event = json.loads(await ws.recv())
        if event["type"] != "error":
            return event, None
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
        return event, closed.value.rcvd


async def test_openai_realtime_model_names_are_served(voice_server: ServerThread) -> None:
    for name in OPENAI_NAMES:
        event, _ = await first_event(voice_server, name)
        assert event["type"] == "session.created", (name, event)
        assert event["session"]["model"] == "scripted-voice"  # the model that answers


async def test_pipecats_default_model_name_through_the_sdk(voice_server: ServerThread) -> None:
    client = AsyncOpenAI(api_key="unused", websocket_base_url=f"{voice_server.ws_url}/v1")
    async with client.realtime.connect(model="gpt-realtime-2.1") as connection:
        created = await connection.recv()
        assert created.type == "session.created" and created.session.model == "scripted-voice"


async def test_a_name_neither_served_nor_an_alias_is_still_refused(voice_server: ServerThread) -> None:
    for name in ("no-such-model", "gpt-4o", "whisper-1"):
        event, closed = await first_event(voice_server, name)
        assert event["error"]["code"] == "model_not_found"
        assert (
            event["error"]["message"] == f"The model `{name}` does not exist or you do not have access to it."
        )
        assert closed is not None and closed.code == 1008


async def test_served_model_names_and_aliases_are_configurable(
    start_server: Callable[..., ServerThread],
) -> None:
    server = start_server(
        registry=registry(),
        voice_model="scripted-voice",
        world_model="none",
        served_model_names=("house-voice", "voice-2"),
        model_aliases=("acme-*",),
    )
    server.wait_ready(timeout=30)
    for name in ("house-voice", "voice-2", "acme-large", "gpt-realtime-2.1", "scripted-voice", "alias"):
        event, _ = await first_event(server, name)
        assert event["type"] == "session.created", (name, event)
        assert event["session"]["model"] == "house-voice"  # the first served name
    event, _ = await first_event(server, "scripted-8k")  # another registered model keeps its name
    assert event["session"]["model"] == "scripted-8k"
    event, _ = await first_event(server, "acme")
    assert event["error"]["code"] == "model_not_found"
    async with websockets.connect(f"{server.ws_url}/v1/realtime?model=gpt-realtime") as ws:
        await ws.recv()
        update = {"type": "session.update", "session": {"type": "realtime", "model": "gpt-realtime-mini"}}
        await ws.send(json.dumps(update))
        updated = json.loads(await ws.recv())
        assert (updated["type"], updated["session"]["model"]) == ("session.updated", "house-voice")


async def until(ws: Any, kind: str) -> dict[str, Any]:
    for _ in range(500):
        event = json.loads(await ws.recv())
        if event["type"] == kind:
            return event
    raise AssertionError(f"no {kind}")


async def test_errors_carry_openais_code_message_and_param(voice_server: ServerThread) -> None:
    async with websockets.connect(f"{voice_server.ws_url}/v1/realtime?model=gpt-realtime") as ws:
        await until(ws, "session.created")

        async def error_for(event: dict[str, Any]) -> dict[str, Any]:
            await ws.send(json.dumps(event))
            body: dict[str, Any] = (await until(ws, "error"))["error"]
            assert body["event_id"] == event["event_id"]  # pipecat finds its retrieve by it
            return body

        for kind, verb in (("retrieve", "retrieving"), ("delete", "deleting"), ("truncate", "truncating")):
            event = {"type": f"conversation.item.{kind}", "item_id": "nope", "event_id": f"rci_{kind}"}
            if kind == "truncate":
                event |= {"content_index": 0, "audio_end_ms": 0}
            body = await error_for(event)
            assert (body["type"], body["code"], body["param"]) == (
                "invalid_request_error",
                f"item_{kind}_invalid_item_id",
                None,
            )
            assert body["message"] == f"Error {verb} item: the item with id 'nope' does not exist."

        body = await error_for({"type": "response.cancel", "event_id": "c1"})
        assert (body["code"], body["message"]) == (
            "response_cancel_not_active",
            "Cancellation failed: no active response found",
        )

        item = {"id": "item_mine", "type": "message", "role": "user"}
        item["content"] = [{"type": "input_text", "text": "hi"}]
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        await until(ws, "conversation.item.done")
        body = await error_for({"type": "conversation.item.create", "item": item, "event_id": "dup"})
        assert (body["code"], body["message"]) == (
            "item_create_duplicate_item_id",
            "Error adding item: an item with id 'item_mine' already exists.",
        )

        await ws.send(json.dumps({"type": "response.create"}))
        created = await until(ws, "response.created")
        body = await error_for({"type": "response.create", "event_id": "again"})
        assert body["code"] == "conversation_already_has_active_response"
        assert body["message"] == (
            f"Conversation already has an active response in progress: {created['response']['id']}. "
            "Wait until the response is finished before creating a new one."
        )
        await until(ws, "response.done")
        body = await error_for({"type": "input_audio_buffer.commit", "event_id": "empty"})
        assert body["code"] == "input_audio_buffer_commit_empty"
        assert body["message"].startswith("Error committing input audio buffer: buffer too small.")


def test_served_names_resolve_families_and_leave_other_names_unknown() -> None:
    from livegen.errors import ConfigError
    from livegen.models.registry import ServedNames

    names = ServedNames(
        registry(), "scripted-voice", served=("house",), patterns=("gpt-realtime", "gpt-realtime-*")
    )
    assert names.resolve("gpt-realtime-2.1") == names.resolve("house") == "scripted-voice"
    assert names.resolve("scripted-8k") == "scripted-8k"
    assert names.canonical("alias") == names.canonical("gpt-realtime") == "house"
    assert names.canonical("nope") == "nope"  # unknown names pass, to be refused where they are opened
    for unknown in ("gpt-realtimex", "gpt-4o", "nope"):
        with pytest.raises(ConfigError):
            names.resolve(unknown)

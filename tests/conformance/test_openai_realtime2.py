"""The Python ``openai`` SDK (GA) and gpt-realtime-2's additions: reasoning, images, keywords.

Driven as the SDK's users drive it (``client.realtime.connect``), against
``livegen serve``: with ``--llm-base-url`` pointing at ``ChatServer`` (a
scripted OpenAI-compatible chat endpoint on loopback, playing a reasoning,
vision-capable model) for reasoning and images, and the suite's plain server
for transcription keywords. Each test is one capability of
docs/compatibility.md; ``tests/models/cascade/test_reasoning.py``,
``test_images.py`` and ``test_transcription_keywords.py`` cover the refusals.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from openai import AsyncOpenAI

from conformance.conftest import API_KEY
from conformance.test_openai_sdk import GA
from livegen.server.thread import ServerThread
from models.cascade.support import ChatServer, RealtimeCall, Reply, speak_afresh
from models.cascade.test_images import data_uri, png

#: Words only the model's thinking holds.
SECRET = "zanzibar"


def _mark(capability: str) -> pytest.MarkDecorator:
    return pytest.mark.conformance(client=GA.client, capability=capability)


def _sdk(server: ServerThread) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key=API_KEY, base_url=f"{server.http_url}/v1", websocket_base_url=f"{server.ws_url}/v1"
    )


async def _turn(server: ServerThread, session: dict[str, Any], content: list[dict[str, Any]]) -> RealtimeCall:
    """One text turn, turn detection off: the session, a user message, a response."""
    async with _sdk(server).realtime.connect(model="gpt-realtime-2") as connection:
        call = RealtimeCall(connection)
        turn_detection = {"audio": {"input": {"turn_detection": None}}}
        await connection.session.update(session={"type": "realtime", **turn_detection, **session})
        await call.wait_for("session.updated")
        item = {"type": "message", "role": "user", "content": content}
        await connection.conversation.item.create(item=item)  # type: ignore[arg-type]
        await connection.response.create()
        await call.wait_for("response.done")
        await call.close()
    return call


def _said(call: RealtimeCall) -> str:
    return "".join(e.delta for e in call.of(GA.transcript_delta))


@_mark("reasoning")
async def test_reasoning(llm_server: ServerThread, chat: ChatServer) -> None:
    chat.replies = [Reply(("<think>", f"{SECRET}</think>", "\n\nParis."), thinking=(f"{SECRET}.",))]
    text = [{"type": "input_text", "text": "The capital of France?"}]
    call = await _turn(llm_server, {"reasoning": {"effort": "low"}}, text)
    assert _said(call) == "Paris."
    assert SECRET not in json.dumps([e.model_dump() for e in call.events])
    assert chat.requests[-1]["reasoning_effort"] == "low"


@_mark("image-input")
async def test_image_input(llm_server: ServerThread, chat: ChatServer) -> None:
    chat.replies = [Reply(("A black square.",))]
    uri = data_uri(png())
    content = [{"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": uri}]
    call = await _turn(llm_server, {}, content)
    assert _said(call) == "A black square."
    parts = chat.requests[-1]["messages"][-1]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": uri, "detail": "auto"}}


@_mark("transcription-keywords")
async def test_transcription_keywords(plain_server: ServerThread) -> None:
    speech = speak_afresh("Please call Siobhan tomorrow.", rate=24_000)
    transcription = {"model": "whisper-1", "keywords": ["Siobhan"]}
    session = {
        "type": "realtime",
        "audio": {"input": {"transcription": transcription, "turn_detection": None}},
    }
    async with _sdk(plain_server).realtime.connect(model="gpt-realtime-2") as connection:
        await connection.session.update(session=session)  # type: ignore[arg-type]
        await connection.input_audio_buffer.append(audio=base64.b64encode(speech).decode())
        await connection.input_audio_buffer.commit()
        async for event in connection:
            assert event.type != "error", event
            if event.type == "conversation.item.input_audio_transcription.completed":
                break
    assert "siobhan" in event.transcript.lower(), event.transcript


@_mark("reasoning")
async def test_a_bare_think_close_hides_everything_before_it(
    llm_server: ServerThread, chat: ChatServer
) -> None:
    # The chat template opened the span in the prompt (Qwen3, DeepSeek-R1 without a reasoning
    # parser): the answer starts thinking, with no <think>, and a bare </think> ends it.
    chat.replies = [Reply((f"Okay, the user asks. {SECRET} is not it. ", "Fine.</thi", "nk>\n\nParis."))]
    text = [{"type": "input_text", "text": "The capital of France?"}]
    call = await _turn(llm_server, {}, text)
    assert _said(call) == "Paris."
    wire = json.dumps([e.model_dump() for e in call.events])
    assert SECRET not in wire and "think" not in wire.lower()


def _phase(item: Any) -> Any:
    return (item.model_extra or {}).get("phase")


@_mark("preambles")
async def test_a_slow_answer_is_preceded_by_a_spoken_preamble_and_history_holds_both(
    llm_server: ServerThread, chat: ChatServer
) -> None:
    chat.delay_s = 2.0  # the language model needs two seconds for its first words
    chat.replies = [Reply(("Paris is the capital.",))]
    text = [{"type": "input_text", "text": "The capital of France?"}]
    call = await _turn(llm_server, {"instructions": "Be brief.\nPreamble: One moment please."}, text)
    (done,) = call.of("response.done")
    commentary, answer = done.response.output
    assert (_phase(commentary), _phase(answer)) == ("commentary", "final_answer")
    assert commentary.content[0].transcript == "One moment please."
    assert answer.content[0].transcript == "Paris is the capital."
    audio_items = [e.item_id for e in call.of("response.output_audio.delta")]
    assert audio_items[0] == commentary.id and set(audio_items) == {commentary.id, answer.id}
    assert audio_items.index(answer.id) > len(audio_items) - audio_items[::-1].index(commentary.id) - 1
    kept = [
        e.item
        for e in call.of("conversation.item.done")
        if e.item.type == "message" and e.item.role == "assistant"
    ]
    assert [(i.id, _phase(i)) for i in kept] == [(commentary.id, "commentary"), (answer.id, "final_answer")]


@_mark("preambles")
@pytest.mark.parametrize("instructions", ["Preamble: off", "Be brief."])
async def test_without_a_preamble_asked_for_a_slow_answer_is_one_message(
    llm_server: ServerThread, chat: ChatServer, instructions: str
) -> None:
    chat.delay_s = 2.0
    chat.replies = [Reply(("Paris.",))]
    text = [{"type": "input_text", "text": "The capital of France?"}]
    call = await _turn(llm_server, {"instructions": instructions}, text)
    (done,) = call.of("response.done")
    (answer,) = done.response.output
    assert _phase(answer) is None and answer.content[0].transcript == "Paris."

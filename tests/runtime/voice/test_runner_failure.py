"""A runner that meets a bug of ours ends its session loudly: error, session.closed, one log line."""

from __future__ import annotations

import logging

import pytest

from livegen.runtime.voice.runner import FAILED_CLOSE_CODE
from livegen.voice.session import Session
from runtime.voice.test_runner import Harness, append
from voice.scripted import ScriptedVoice


async def test_an_unexpected_exception_ends_the_session_with_an_error_and_a_terminal(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # logs.configure() (the CLI's tests) may have stopped livegen's loggers from propagating.
    monkeypatch.setattr(logging.getLogger("livegen"), "propagate", True)
    caplog.set_level(logging.INFO, logger="livegen")
    h = await Harness(ScriptedVoice()).start()

    def broken(event: object, now: float) -> list[object]:
        raise TypeError("unhashable type: 'list'")  # what a wrong type once did deep in the core

    h.session.receive = broken  # type: ignore[method-assign]
    await h.client({"type": "conversation.item.retrieve", "item_id": "x"})
    await h.task  # the runner ends by itself, and without raising
    kinds = [e["type"] for e in h.sent]
    assert kinds[-2:] == ["error", "session.closed"]
    error = h.sent[-2]["error"]
    assert (error["type"], error["code"]) == ("server_error", "internal_error")
    assert h.sent[-1]["reason"] == "server_error"
    assert h.runner.failed and h.runner.done.is_set() and FAILED_CLOSE_CODE == 1011
    failures = [r for r in caplog.records if r.getMessage() == "voice.runner_failed"]
    assert len(failures) == 1 and failures[0].levelno == logging.ERROR and failures[0].exc_info


async def test_a_broken_core_still_gets_its_terminal_event() -> None:
    h = await Harness(ScriptedVoice()).start()

    def broken(*args: object) -> list[object]:
        raise RuntimeError("broken")

    h.session.receive = broken  # type: ignore[method-assign]
    h.session.close = broken  # type: ignore[method-assign]
    await h.client({"type": "input_audio_buffer.clear"})
    await h.task
    assert [e["type"] for e in h.sent][-2:] == ["error", "session.closed"]
    assert isinstance(h.session, Session) and h.runner.failed


async def test_after_a_refused_append_the_next_append_starts_afresh() -> None:
    """The docs' promise for ``model_append_failed``: the turn is rolled back in the model too.

    A model that refuses input for being full (the cascade's 300 s cap) refused every later
    append, because the audio before the refusal stayed in its buffer."""
    model = ScriptedVoice()
    h = await Harness(model).start()
    await h.client(append(100))
    await h.wait_for(lambda sent: h.stream.received != [])
    model.script.num_failing_appends = 1
    await h.client(append(100))
    await h.wait_for(lambda sent: any(e["type"] == "error" for e in sent))
    assert [e["error"]["code"] for e in h.of("error")] == ["model_append_failed"]
    await h.client(append(300))
    await h.client({"type": "input_audio_buffer.commit"})
    kind = "conversation.item.input_audio_transcription.completed"
    await h.wait_for(lambda sent: any(e["type"] == kind for e in sent))
    assert h.of(kind)[0]["transcript"] == "300 ms"  # only the audio after the refusal
    assert "clear" in h.stream.calls
    await h.close()

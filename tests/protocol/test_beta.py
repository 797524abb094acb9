"""The beta dialect: GA server events rewritten for beta clients, and who asks for it."""

from __future__ import annotations

from livegen.protocol.realtime.beta import BETA_NAMES, to_beta, wants_beta
from livegen.voice.config import Config


def test_renamed_events_get_their_beta_names_and_keep_their_fields() -> None:
    for ga, beta in BETA_NAMES.items():
        event = {"type": ga, "event_id": "e1", "response_id": "r1", "delta": "x"}
        assert to_beta(event) == {**event, "type": beta}
    assert to_beta({"type": "response.output_audio.delta", "delta": "AAAA"})["type"] == "response.audio.delta"


def test_events_the_dialects_share_pass_unchanged() -> None:
    for kind in ("response.created", "input_audio_buffer.committed", "error", "session.closed"):
        event = {"type": kind, "event_id": "e"}
        assert to_beta(event) is event


def test_part_and_item_content_types_are_beta_types() -> None:
    part = {"type": "response.content_part.added", "part": {"type": "output_audio", "transcript": ""}}
    assert to_beta(part)["part"]["type"] == "audio"
    item = {
        "id": "i",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "hi"}],
    }
    assert to_beta({"type": "conversation.item.added", "item": item})["item"]["content"][0]["type"] == "text"
    done = {"type": "response.done", "response": {"id": "r", "output": [item]}}
    assert to_beta(done)["response"]["output"][0]["content"][0]["type"] == "text"
    user = {"id": "u", "type": "message", "role": "user", "content": [{"type": "input_audio"}]}
    assert to_beta({"type": "conversation.item.done", "item": user})["item"] == user
    assert item["content"][0]["type"] == "output_text"  # the GA event is not changed in place


def test_the_session_object_gains_the_flat_beta_fields() -> None:
    session = Config(model="m").to_wire("sess_1")
    beta = to_beta({"type": "session.created", "session": session})["session"]
    assert beta["input_audio_format"] == beta["output_audio_format"] == "pcm16"
    assert beta["modalities"] == ["text", "audio"] and beta["voice"] == "alloy"
    assert beta["turn_detection"]["type"] == "server_vad"
    assert beta["audio"] == session["audio"]  # GA fields stay for clients that read both


def test_the_header_or_the_subprotocol_asks_for_beta() -> None:
    assert wants_beta({"openai-beta": "realtime=v1"}, [])
    assert wants_beta({}, ["realtime", "openai-beta.realtime-v1"])
    assert not wants_beta({"openai-beta": "assistants=v2"}, ["realtime"])
    assert not wants_beta({}, [])

"""The beta dialect: GA server events rewritten for beta clients, and who asks for it."""

from __future__ import annotations

from livegen.protocol.realtime import server as ev
from livegen.protocol.realtime.beta import BETA_EVENTS, BETA_NAMES, to_beta, wants_beta
from livegen.protocol.realtime.items import MessageItem, content_part
from livegen.protocol.realtime.response import ResponseAudio, ResponseAudioOutput, ResponseObject
from livegen.protocol.realtime.session import AudioFormatObject
from livegen.voice.config import Config

REFS = {"response_id": "r1", "item_id": "i1", "output_index": 0, "content_index": 0}


def sample(cls: type[ev.ServerEvent]) -> ev.ServerEvent:
    """An event of ``cls`` with plain values in its fields (the renamed kinds)."""
    extra = {name: "x" for name in ("delta", "text", "transcript") if name in cls.__struct_fields__}
    if "item" in cls.__struct_fields__:
        return cls(event_id="e1", item=message("output_text"), previous_item_id=None)  # type: ignore[call-arg]
    return cls(event_id="e1", **REFS, **extra)  # type: ignore[arg-type]


def message(kind: str, text: str | None = "hi", role: str = "assistant") -> MessageItem:
    return MessageItem(id="i", role=role, status="completed", content=[content_part(kind, text)])


def test_renamed_events_get_their_beta_names_and_keep_their_fields() -> None:
    assert set(BETA_NAMES) == {ev.type_of_class(cls) for cls in BETA_EVENTS}
    for ga, beta in BETA_EVENTS.items():
        event = sample(ga)
        renamed = to_beta(event)
        assert ev.type_of(renamed) == BETA_NAMES[ev.type_of(event)] == ev.type_of_class(beta)
        fields = {**ev.as_dict(event), "type": ev.type_of(renamed)}
        if "item" in fields:
            fields["item"]["content"][0]["type"] = "text"
        assert ev.as_dict(renamed) == fields
    delta = ev.OutputAudioDelta(delta="AAAA", **REFS)  # type: ignore[arg-type]
    assert ev.type_of(to_beta(delta)) == "response.audio.delta"


def test_events_the_dialects_share_pass_unchanged() -> None:
    shared: list[ev.ServerEvent] = [
        ev.InputAudioBufferCommitted(event_id="e", item_id="i", previous_item_id=None),
        ev.Error(event_id="e", error={"code": "x"}),
        ev.SessionClosed(event_id="e", session_id="s", reason="client_closed"),
    ]
    for event in shared:
        assert to_beta(event) is event


def test_part_and_item_content_types_are_beta_types() -> None:
    part = ev.ContentPartAdded(part=content_part("output_audio", ""), **REFS)  # type: ignore[arg-type]
    assert ev.as_dict(to_beta(part))["part"]["type"] == "audio"
    item = message("output_text")
    added = ev.ItemAdded(item=item, previous_item_id=None)
    assert ev.as_dict(to_beta(added))["item"]["content"][0]["type"] == "text"
    audio = ResponseAudio(ResponseAudioOutput(AudioFormatObject("audio/pcm", 24_000), "alloy"))
    response = ResponseObject(
        id="r",
        status="completed",
        status_details=None,
        output=[item],
        output_modalities=["text"],
        conversation_id=None,
        audio=audio,
        max_output_tokens="inf",
        metadata=None,
        usage=None,
    )
    done = ev.ResponseDone(response=response)
    assert ev.as_dict(to_beta(done))["response"]["output"][0]["content"][0]["type"] == "text"
    user = message("input_audio", None, role="user")
    assert ev.as_dict(to_beta(ev.ItemDone(item=user, previous_item_id=None)))["item"] == ev.as_dict(user)
    assert ev.as_dict(item)["content"][0]["type"] == "output_text"  # the GA event is not changed in place


def test_the_session_object_gains_the_flat_beta_fields() -> None:
    session = Config(model="m").to_object("sess_1")
    beta = ev.as_dict(to_beta(ev.SessionCreated(session=session)))["session"]
    assert beta["input_audio_format"] == beta["output_audio_format"] == "pcm16"
    assert beta["modalities"] == ["text", "audio"] and beta["voice"] == "alloy"
    assert beta["turn_detection"]["type"] == "server_vad"
    assert beta["audio"] == ev.as_dict(session)["audio"]  # GA fields stay for clients that read both


def test_the_header_or_the_subprotocol_asks_for_beta() -> None:
    assert wants_beta({"openai-beta": "realtime=v1"}, [])
    assert wants_beta({}, ["realtime", "openai-beta.realtime-v1"])
    assert not wants_beta({"openai-beta": "assistants=v2"}, ["realtime"])
    assert not wants_beta({}, [])


def test_noise_reduction_is_a_flat_beta_field_while_it_is_on() -> None:
    session = Config(model="m", noise_reduction="far_field").to_object("sess_1")
    beta = ev.as_dict(to_beta(ev.SessionCreated(session=session)))["session"]
    assert beta["input_audio_noise_reduction"] == {"type": "far_field"}
    assert beta["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
    off = ev.as_dict(to_beta(ev.SessionCreated(session=Config(model="m").to_object("sess_1"))))["session"]
    assert "input_audio_noise_reduction" not in off  # as beta sessions were sent before it was honoured
    assert off["audio"]["input"]["noise_reduction"] is None

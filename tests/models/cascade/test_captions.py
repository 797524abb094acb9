"""Live captions: local agreement sends a prefix that never changes, and the stream sends it while
the user speaks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from livegen.models.cascade import captions
from livegen.models.voice import OutputKind, StreamConfig, TurnDetection
from models.cascade.support import Driver, speak_as_user


def test_a_word_is_sent_once_two_decodes_agree_on_it_and_the_newest_decode_goes_past_it() -> None:
    agreement = captions.Agreement()
    assert agreement.feed("Please") == ""
    assert agreement.feed("Please repeat") == "Please"
    assert agreement.feed("Please repeat after") == " repeat"  # "after" is the newest's last word
    assert agreement.feed("Please, repeat after me") == " after"  # punctuation is not a change
    assert agreement.feed("Police repeat after me purple") == ""  # disagrees with what was sent
    assert agreement.text == "Please repeat after"
    assert agreement.rest("Please repeat after me, purple elephants.") == " me, purple elephants."
    assert agreement.rest("Police repeat after me.") is None


def test_without_captions_the_rest_is_everything() -> None:
    assert captions.Agreement().rest("What time is it?") == "What time is it?"


@given(st.lists(st.lists(st.sampled_from(["a", "b", "c", "a,", "B"]), max_size=8), max_size=12))
def test_what_is_sent_only_grows_and_adds_up(decodes: list[list[str]]) -> None:
    agreement = captions.Agreement()
    sent = ""
    for words in decodes:
        before = list(agreement.sent)
        sent += agreement.feed(" ".join(words))
        assert agreement.sent[: len(before)] == before
        assert sent == agreement.text


@pytest.mark.slow
async def test_words_are_captioned_while_the_user_is_still_speaking(cascade: Any) -> None:
    said = "Please repeat after me, purple elephants dance slowly across the wide green field."
    config = StreamConfig(turn_detection=TurnDetection(), transcription_model="whisper-tiny.en")
    stream = await cascade.open("captions", config)
    driver = Driver(stream)
    await driver.say(1, speak_as_user(cascade, said), realtime=True)
    stopped = await driver.wait_for(OutputKind.SPEECH_STOPPED)
    await stream.commit(1, "item_1")
    done = await driver.wait_for(OutputKind.TRANSCRIPT_DONE, item_id="item_1")
    await driver.close()
    deltas = driver.of(OutputKind.TRANSCRIPT_DELTA)
    live = [d for d in deltas if d.item_id is None]
    assert live, [d.text for d in deltas]
    assert driver.outputs.index(live[0]) < driver.outputs.index(stopped)  # before the speech ended
    # The completed transcript starts with what was captioned, and the deltas add up to it.
    assert [d.item_id for d in deltas[len(live) :]] == ["item_1"] * (len(deltas) - len(live))
    assert "".join(d.text for d in deltas) == done.text


@pytest.mark.slow
async def test_no_live_decodes_without_input_transcription(cascade: Any) -> None:
    stream = await cascade.open("quiet", StreamConfig(turn_detection=TurnDetection()))
    driver = Driver(stream)
    decodes, speculations = sum(cascade.stats.asr_by_model.values()), cascade.stats.num_speculations
    await driver.say(1, speak_as_user(cascade, "What is the date today, and what time is it?"), realtime=True)
    await driver.wait_for(OutputKind.SPEECH_STOPPED)
    await driver.close()
    assert not [d for d in driver.of(OutputKind.TRANSCRIPT_DELTA) if d.item_id is None]
    # Every decode was a speculation at a pause: none for captions.
    new_decodes = sum(cascade.stats.asr_by_model.values()) - decodes
    assert new_decodes <= cascade.stats.num_speculations - speculations

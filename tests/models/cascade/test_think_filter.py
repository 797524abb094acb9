"""A model's thinking inline in ``content`` never comes out as words (``chat_stream.ThinkFilter``),
whether its span opens with ``<think>`` or only closes with a bare ``</think>``."""

from __future__ import annotations

import pytest

from livegen.models.cascade.chat_stream import ThinkFilter


def _through(bare: bool | None, pieces: list[str], is_cut: bool = False) -> str:
    think = ThinkFilter(bare)
    return "".join(think.feed(piece) for piece in pieces) + think.flush(is_cut)


@pytest.mark.parametrize("bare", [None, True])
def test_everything_before_a_bare_close_is_thinking(bare: bool | None) -> None:
    assert _through(bare, ["Okay, the user", " asks. Hm.</th", "ink>\n\nParis", " it is."]) == "Paris it is."


def test_an_answer_without_tags_comes_out_whole_when_the_endpoint_is_not_known_to_think_bare() -> None:
    assert _through(None, ["Paris ", "it is."]) == "Paris it is."
    assert _through(False, ["Paris ", "it is."]) == "Paris it is."


def test_an_answer_cut_off_before_its_close_is_dropped_unless_the_endpoint_never_thinks_bare() -> None:
    assert _through(True, ["Still thinking about it"]) == ""
    assert _through(None, ["Still thinking about it"], is_cut=True) == ""
    assert _through(False, ["Paris is"], is_cut=True) == "Paris is"


def test_an_opening_tag_releases_the_words_before_it() -> None:
    assert _through(None, ["So: <thi", "nk>hmm</think>\n", "Paris."]) == "So: Paris."


def test_text_held_while_unknown_comes_out_when_the_endpoint_keeps_its_thinking_apart() -> None:
    think = ThinkFilter(None)
    assert think.feed("Paris") == ""
    assert think.released() == "Paris"
    assert think.feed(" it is.") == " it is."

"""The pacing lead: the longest recent step with a margin, plus the lateness of recent chunks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from livegen.world.lead import LATE_WINDOW, LEAD_FACTOR, LEAD_MARGIN_S, MAX_LATE_S, Lead

FRAME_S = 1 / 16


def test_on_time_starts_leave_the_lead_at_the_step_time_with_its_margin() -> None:
    lead = Lead()
    lead.stepped(0.010)
    for k in range(10):
        lead.started(k * FRAME_S, 100.0 + k * FRAME_S)
    assert lead.seconds() == pytest.approx(LEAD_FACTOR * 0.010 + LEAD_MARGIN_S)


def test_a_late_chunk_lengthens_the_lead_by_its_lateness_until_it_ages_out() -> None:
    lead = Lead()
    lead.stepped(0.010)
    base = LEAD_FACTOR * 0.010 + LEAD_MARGIN_S
    lead.started(0.0, 100.0)
    lead.started(FRAME_S, 100.0 + FRAME_S + 0.030)  # shown 30 ms after the client needed it
    assert lead.seconds() == pytest.approx(base + 0.030)
    start = 100.030 + FRAME_S
    for k in range(2, 2 + LATE_WINDOW):
        lead.started(k * FRAME_S, start + (k - 1) * FRAME_S)
    assert lead.seconds() == pytest.approx(base)


def test_a_reset_forgets_the_last_start_since_the_media_clock_restarts() -> None:
    lead = Lead()
    lead.started(5.0, 100.0)
    lead.reset()
    lead.started(0.0, 101.0)  # chunk 0 of the new rollout: not 6 s early, not late
    assert lead.seconds() == pytest.approx(LEAD_MARGIN_S)


@given(
    steps=st.lists(st.floats(0, 1), max_size=20),
    gaps=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 2)), max_size=50),
)
def test_the_lead_covers_the_longest_recent_step_and_counts_lateness_within_bounds(
    steps: list[float], gaps: list[tuple[float, float]]
) -> None:
    lead = Lead()
    for step in steps:
        lead.stepped(step)
    media, now = 0.0, 0.0
    for media_gap, clock_gap in gaps:
        media, now = media + media_gap, now + clock_gap
        lead.started(media, now)
    floor = LEAD_FACTOR * max(steps[-8:], default=0.0) + LEAD_MARGIN_S
    assert floor <= lead.seconds() <= floor + MAX_LATE_S + 1e-9

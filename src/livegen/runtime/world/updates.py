"""What a world ``session.update`` may change: the runner's options from a session's first
update, and the check that a later one changes nothing the world was made from (seed, prompt,
seed image, queue bound, chunk length, recording); ``engine.py`` applies both.
"""

from __future__ import annotations

from livegen.errors import InvalidRequest
from livegen.protocol import world as wire
from livegen.runtime.world.runner import Options, Runner


def options_of(update: wire.SessionConfig) -> Options:
    """The runner's options from a session's first ``session.update``."""
    output = update.output or wire.OutputConfig()
    return Options(
        pacing=update.pacing or "realtime",
        format=output.format,
        quality=output.quality,
        max_chunks_ahead=update.max_chunks_ahead or 4,
        frames_per_chunk=update.frames_per_chunk,
        recording=bool(update.recording),
    )


def check_fixed(runner: Runner, update: wire.SessionConfig) -> None:
    """Refuse a later ``session.update`` that would change what the world was made from."""
    session = runner.session
    fixed = {
        "seed": (update.seed, session.seed),
        "prompt": (update.prompt, session.initial_prompt),
        "max_pending_events": (update.max_pending_events, session.max_pending_events),
    }
    length = update.frames_per_chunk
    if length is not None and length not in (runner.options.frames_per_chunk, runner.spec.frames_per_chunk):
        raise InvalidRequest(
            "session.frames_per_chunk is fixed once the session exists (give it in the first session.update)",
            code="invalid_request",
            param="session.frames_per_chunk",
        )
    if update.recording is not None and update.recording != runner.options.recording:
        raise InvalidRequest(
            "session.recording is fixed once the session exists (give it in the first session.update)",
            code="invalid_request",
            param="session.recording",
        )
    if update.seed_image is not None:
        raise InvalidRequest(
            "session.seed_image is fixed once the session exists (give it in the first session.update)",
            code="invalid_request",
            param="session.seed_image",
        )
    for name, (asked, current) in fixed.items():
        if asked is not None and asked != current:
            raise InvalidRequest(
                f"session.{name} is fixed once the session exists (send a world.event for a new prompt)",
                code="invalid_request",
                param=f"session.{name}",
            )

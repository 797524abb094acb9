"""A world's control tracks: which there are, what each accepts, and where each starts.

The model declares its tracks (``ControlTrack``: a name, a schema id, a JSON
schema and a default); this module owns their compiled checks and their
defaults, so the session core (``session.py``) asks one object whether an
event's controls fit and what the controls are after a reset. Sans-IO, as the
rest of ``world/``.
"""

from __future__ import annotations

from collections.abc import Sequence

from livegen.errors import InvalidRequest
from livegen.models.world import ControlTrack
from livegen.world import schema
from livegen.world.events import ControlInput, Event, freeze


class Tracks:
    """The control tracks of one world, each with its compiled schema check."""

    def __init__(self, tracks: Sequence[ControlTrack]) -> None:
        self._tracks = {track.name: track for track in tracks}
        self._checks = {track.name: schema.compile_schema(track.json_schema) for track in tracks}
        self._paths = {track.name: f"controls.{track.name}.data" for track in tracks}

    def check(self, event: Event) -> None:
        """Refuse an event whose controls name an unknown track, a wrong schema or bad data."""
        for control in event.controls:
            found = self._problem(control)
            if found:
                raise InvalidRequest(found, code="invalid_event", param="controls", event_id=event.event_id)

    def _problem(self, control: ControlInput) -> str | None:
        track = self._tracks.get(control.track)
        if track is None:
            known = ", ".join(sorted(self._tracks)) or "none"
            return f"unknown control track {control.track!r}; this model's tracks: {known}"
        if control.schema != track.schema:
            return f"track {track.name!r} takes schema {track.schema!r}, got {control.schema!r}"
        path = self._paths[track.name]
        found = self._checks[track.name](control.data, path)
        extra = schema.SEMANTIC_CHECKS.get(track.schema)
        if found is None and extra is not None:
            found = extra(control.data, path)
        return found

    def defaults(self) -> dict[str, ControlInput]:
        """Every track at its declared default: the controls of a new or reset world."""
        tracks = self._tracks.items()
        return {name: ControlInput(name, track.schema, freeze(track.default)) for name, track in tracks}

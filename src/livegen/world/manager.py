"""The sessions of one service, by id, with tombstones for failed cleanups.

A closed session leaves the manager only once its model-side state was
released; until then its id is a tombstone that refuses reuse (promise W4,
docs/architecture.md), and it still counts against ``max_sessions`` because its state may
still hold memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from livegen.errors import CapacityExceeded, InvalidState
from livegen.models.world import ControlTrack
from livegen.world.reducer import Reducer
from livegen.world.session import Session, Status


class Manager:
    def __init__(
        self,
        *,
        tracks: Sequence[ControlTrack],
        new_id: Callable[[], str],
        max_sessions: int = 64,
        reducer_factory: Callable[[], Reducer] | None = None,
        players: Sequence[Sequence[str]] = (),
    ) -> None:
        self._tracks = tuple(tracks)
        #: Each player's tracks, as the model declares them (``WorldSpec.players``).
        self._players = tuple(tuple(tracks) for tracks in players)
        self._new_id = new_id
        self.max_sessions = max_sessions
        self._reducer_factory = reducer_factory
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    @property
    def tombstones(self) -> list[str]:
        return [sid for sid, s in self._sessions.items() if s.status is Status.CLEANUP_FAILED]

    def create(self, session_id: str | None = None, **options: Any) -> Session:
        """A new session; refuses a live or tombstoned id, and refuses beyond ``max_sessions``."""
        session_id = session_id or self._new_id()
        existing = self._sessions.get(session_id)
        if existing is not None:
            code = "session_cleanup_pending" if existing.status is Status.CLEANUP_FAILED else "session_exists"
            raise InvalidState(f"session {session_id!r} exists ({existing.status.value})", code=code)
        if len(self._sessions) >= self.max_sessions:
            raise CapacityExceeded(
                f"server full: {self.max_sessions} world sessions are open", code="too_many_sessions"
            )
        reducer = self._reducer_factory() if self._reducer_factory else None
        session = Session(
            session_id,
            tracks=self._tracks,
            new_id=self._new_id,
            reducer=reducer,
            players=self._players,
            **options,
        )
        self._sessions[session_id] = session
        return session

    def get(self, session_id: str) -> Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise InvalidState(f"no session {session_id!r}", code="session_not_found") from None

    def finish_close(self, session_id: str, is_released: bool) -> None:
        """Record a close's cleanup; the entry goes only when the cleanup worked."""
        session = self.get(session_id)
        session.finish_close(is_released)
        if session.status is Status.CLOSED:
            del self._sessions[session_id]

"""The paged KV pool: which pages of the model's KV tensors each world session holds.

nano-vllm style: plain Python bookkeeping here, the tensors in the model
(``WorldModel.new_kv_storage``). One page holds one latent frame's K and V
across all layers (``KVGeometry.page_bytes``). A session keeps its first
``sink_frames`` pages for good and a sliding window of the last
``window_frames`` pages; each tick writes ``frames_per_chunk`` new pages.

Pages count latent frames: ``frames_per_chunk`` here is a chunk's pages (its
latent frames, ``WorldSpec.pages_in_chunk``), and chunk 0 may write a
different number (``first_chunk_pages``).

Admission is one formula: a session can hold at most
``sink + window + max(pages per chunk)`` pages at once, plus the model's
per-session state besides KV (``state_bytes_per_session``: a VAE's causal
cache, the prompt's cross-attention K/V), so the pool admits
``budget_bytes // (pages_per_session * page_bytes + state_bytes_per_session)``
sessions and reserves that many pages for each on admission. A tick can then
never run out of pages mid-rollout; a session that does not fit is refused
cleanly at creation (``CapacityExceeded``, code ``kv_pool_full``), never a stall.

Pages go back on failure and reset (``clear``: the session stays admitted)
and on close or disconnect (``release``: it leaves).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from livegen.errors import CapacityExceeded, ConfigError, LocalProtocolError
from livegen.models.world import KVGeometry, WorldSpec


@dataclass
class _Pages:
    sink: list[int] = field(default_factory=list)
    window: deque[int] = field(default_factory=deque)
    writing: list[int] = field(default_factory=list)

    def all(self) -> list[int]:
        return [*self.sink, *self.window, *self.writing]


def pages_per_session(geometry: KVGeometry, frames_per_chunk: int) -> int:
    return geometry.sink_frames + geometry.window_frames + frames_per_chunk


def required_bytes(
    geometry: KVGeometry, frames_per_chunk: int, num_sessions: int, state_bytes_per_session: int = 0
) -> int:
    """Bytes of KV storage and model state that ``num_sessions`` concurrent sessions need."""
    per_session = pages_per_session(geometry, frames_per_chunk) * geometry.page_bytes
    return num_sessions * (per_session + state_bytes_per_session)


class Pool:
    def __init__(
        self,
        geometry: KVGeometry,
        frames_per_chunk: int,
        budget_bytes: int,
        *,
        first_chunk_pages: int | None = None,
        state_bytes_per_session: int = 0,
    ) -> None:
        self.geometry = geometry
        self.frames_per_chunk = frames_per_chunk
        self.first_chunk_pages = first_chunk_pages or frames_per_chunk
        most = max(frames_per_chunk, self.first_chunk_pages)
        self.pages_per_session = pages_per_session(geometry, most)
        self.state_bytes_per_session = state_bytes_per_session
        self.capacity = budget_bytes // required_bytes(geometry, most, 1, state_bytes_per_session)
        # The budget left once each admitted session's model state is set aside holds the pages.
        self.num_pages = (budget_bytes - self.capacity * state_bytes_per_session) // geometry.page_bytes
        if self.capacity < 1:
            need = required_bytes(geometry, most, 1, state_bytes_per_session)
            raise ConfigError(f"KV budget of {budget_bytes} bytes is below one session's {need} bytes")
        self._free: list[int] = list(range(self.num_pages - 1, -1, -1))
        self._sessions: dict[str, _Pages] = {}

    @classmethod
    def for_spec(cls, spec: WorldSpec, budget_bytes: int) -> Pool:
        """The pool for a model's spec: its geometry, pages per chunk and per-session state."""
        assert spec.kv is not None
        return cls(
            spec.kv,
            spec.pages_in_chunk(1),
            budget_bytes,
            first_chunk_pages=spec.pages_in_chunk(0),
            state_bytes_per_session=spec.state_bytes_per_session,
        )

    @property
    def num_sessions(self) -> int:
        return len(self._sessions)

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def is_full(self) -> bool:
        return self.num_sessions >= self.capacity

    def admit(self, session_id: str) -> None:
        if session_id in self._sessions:
            return
        if self.is_full:
            raise CapacityExceeded(
                f"KV pool full: {self.capacity} sessions of {self.pages_per_session} pages each",
                code="kv_pool_full",
            )
        self._sessions[session_id] = _Pages()

    def pages(self, session_id: str) -> tuple[int, ...]:
        return tuple(self._held(session_id).all())

    def plan(
        self, session_id: str, chunk_index: int | None = None, pages: int | None = None
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(context pages: sinks then window, oldest first; pages to write this chunk into).

        ``pages``: the chunk's pages where the session asked for shorter chunks than the pool was
        sized for (``WorldSpec.for_session``); never more than a session was admitted for."""
        held = self._held(session_id)
        if held.writing:
            raise LocalProtocolError(f"session {session_id!r} already has a chunk being written")
        count = self.first_chunk_pages if chunk_index == 0 else self.frames_per_chunk
        if pages is not None:
            if not 1 <= pages <= count:
                raise LocalProtocolError(f"a chunk of {pages} pages, where a session has {count}")
            count = pages
        held.writing = [self._free.pop() for _ in range(count)]
        return (*held.sink, *held.window), tuple(held.writing)

    def abort(self, session_id: str) -> None:
        """Drop the chunk being written: its pages go back, the context stays as it was."""
        held = self._held(session_id)
        self._free.extend(held.writing)
        held.writing = []

    def commit(self, session_id: str) -> None:
        """The written chunk becomes context: sinks fill first, the window slides."""
        held = self._held(session_id)
        for page in held.writing:
            if len(held.sink) < self.geometry.sink_frames:
                held.sink.append(page)
            else:
                held.window.append(page)
        held.writing = []
        while len(held.window) > self.geometry.window_frames:
            self._free.append(held.window.popleft())

    def clear(self, session_id: str) -> None:
        """Free every page of a session (failure, reset); it stays admitted."""
        held = self._sessions.get(session_id)
        if held is not None:
            self._free.extend(held.all())
            self._sessions[session_id] = _Pages()

    def release(self, session_id: str) -> None:
        """Free every page and the admission (close, disconnect)."""
        self.clear(session_id)
        self._sessions.pop(session_id, None)

    def _held(self, session_id: str) -> _Pages:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise LocalProtocolError(f"session {session_id!r} is not admitted to the KV pool") from None

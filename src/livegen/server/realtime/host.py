"""What the voice service shares with the transports it hosts (GPT-Live, translation sessions,
WebRTC calls): the narrow ``VoiceHost`` they see it as, a WebSocket as the engine sees it, and a
new session's id. The companions name this module, never the service that builds them, so that
``realtime/voice.py`` imports them and none imports it back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

from livegen.errors import RemoteProtocolError
from livegen.protocol import realtime as wire

if TYPE_CHECKING:
    from livegen.runtime.voice.engine import VoiceEngine
    from livegen.server.http.client_secrets import ClientSecrets
    from livegen.server.state import State


class VoiceHost(Protocol):
    """The voice service as its companions use it: the app's state, the engine, the keys."""

    state: State
    engine: VoiceEngine
    client_secrets: ClientSecrets


class WebSocketLink:
    """A client's WebSocket as the engine sees it (``runtime.voice.lifecycle.Link``)."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket

    async def send_text(self, text: str) -> None:
        await self.websocket.send_text(text)

    async def close(self, code: int) -> None:
        await self.websocket.close(code)

    async def receive(self) -> str | wire.ClientEvent | RemoteProtocolError | int:
        try:
            message = await self.websocket.receive()
        except WebSocketDisconnect as gone:
            return gone.code
        if message["type"] == "websocket.disconnect":
            return int(message.get("code", 1006))
        try:
            return wire.text_of(message)
        except RemoteProtocolError as error:
            return error


def new_session_id(state: State) -> str:
    """``sess_`` and 16 hex digits; in a cluster the first four are this process's tag, so that
    any process can tell where a resume belongs (``cluster/coordinator.py``)."""
    return state.gate.new_id("sess_", 16)

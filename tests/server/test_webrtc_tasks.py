"""A call's tasks are its own: whatever way it ends, none outlives it (none is left to the garbage
collector, none holds its connection open).

Real server, real aiortc caller (``livegen.client.webrtc``), the scripted test model.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from livegen.client.webrtc import Caller
from livegen.server.thread import ServerThread
from voice.scripted import registry


def voice_service(server: ServerThread) -> Any:
    return next(s for s in server.app.state.livegen.services if s.name == "voice")


async def test_a_server_that_stops_under_a_call_whose_peer_does_not_read_lets_it_go(
    start_server: Callable[..., ServerThread],
) -> None:
    server = start_server(registry=registry(), voice_model="scripted-voice", world_model="none")
    server.wait_ready(timeout=30)
    caller = Caller(server.http_url, None)
    try:
        await caller.connect()
        await caller.event("session.created")
        calls = voice_service(server).calls
        (call,) = calls.calls.values()
        # The stop blocks this loop, so the caller acknowledges nothing meanwhile: the call's last
        # events cannot leave, and its serving task outlives the stop's grace. It is cancelled and
        # awaited then, so the connection is closed (its UDP sockets with it) and no task is left.
        unraisable: list[Any] = []
        hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
        try:
            server.stop()
        finally:
            sys.unraisablehook = hook
        leaks = [u for u in unraisable if isinstance(u.exc_value, ResourceWarning)]
        assert not leaks, [str(u.exc_value) for u in leaks]  # its UDP sockets, left open at exit
        assert len(calls.tasks) == 0 and len(call.tasks) == 0
        assert call.pc.connectionState == "closed" and not calls.calls
    finally:
        await caller.close()

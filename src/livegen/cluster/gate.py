"""The session gate: draining, server-wide session counts, and resumes owned by another process.

``GateMiddleware`` sits in front of the session routes (``/v1/realtime``,
``/v1/worlds``) of every server, one process or many:

- *draining* (``SIGTERM``, ``cluster/supervisor.py``): a new session is refused at
  the handshake with HTTP 503 ``server_draining`` and ``/health`` answers 503
  ``draining``; resumes still attach, so a parked session may finish;
- in a cluster (``--workers``, ``--ray-address``; ``cluster/coordinator.py``) a new
  session takes one of its ``livegen serve``'s ``--max-sessions`` from the
  coordinator before it opens (the process's own engines still count their
  own), and gives it back when its socket ends; a resumed socket is counted
  again, never refused for room;
- a resume (``?session_id=``) of a session another process owns is relayed to
  that process's private address (``cluster/forward.py``), and so are a WebRTC
  call's ``?call_id=`` attach and its hangup, a world call's too (the call's
  id carries its process's tag too: its media flows to that process), and a call offer that
  resumes a session (``POST /v1/realtime/calls?session_id=``); connections to this
  process's private address by the relay are resumes: never relayed again,
  counted here (the relaying process does not), never refused for room nor by
  a drain. The relay's mark (``x-livegen-relayed``) is the cluster's shared
  secret (``Coordinator.relay_key``), honoured on the private port only and
  only on a request that names a session or a call: a client that reaches the
  private port with a forged mark is served as on the public port, counted
  against ``--max-sessions`` like any new session. A duplex socket names the
  session it resumes in its first message: it is counted when that message
  comes (a resume as a resume), and ``server/realtime/voice.py`` relays it, not the gate.

``/health`` names the processes' private addresses and Ray's nodes only to an
authenticated request (``may_see_private``).

It also counts the session sockets open here, which a drain waits on, and in a
cluster learns the ephemeral keys other processes minted, before the key is
checked (``APIKeyMiddleware`` comes after it).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import re
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from livegen.cluster.forward import (
    OWNER_ANSWER_TIMEOUT_S,
    RELAY_KEY,
    RELAYED_HEADER,
    forward,
    forward_http,
    send_refusal,
)
from livegen.errors import RemoteProtocolError
from livegen.protocol import errors as wire_errors
from livegen.protocol.realtime import duplex
from livegen.server.http.auth import presented_key, select_subprotocol
from livegen.server.http.client_secrets import PREFIX, ClientSecret
from livegen.server.http.origins import send_denial

if TYPE_CHECKING:
    from livegen.cluster.coordinator import Member
    from livegen.server.http.client_secrets import ClientSecrets

#: Session routes and the kind of session each opens.
KINDS = {"/v1/realtime": "voice", "/v1/worlds": "world"}
#: A hangup (a voice call's, a world call's, a GPT-Live session's), which goes to the process that
#: holds the call or the session.
HANGUP = re.compile(r"/v1/(?:(?:realtime|worlds)/calls|live/sessions)/([^/]+)/hangup")
#: WebRTC call offers; one with ``?session_id=`` goes to the process that holds that session.
CALLS = "/v1/realtime/calls"
#: How long the owner may take to answer a relayed call offer (it gathers its ICE candidates
#: first, which with STUN servers takes seconds; a caller's own client waits about this long).
OFFER_ANSWER_TIMEOUT_S = 30.0


@dataclass
class Gate:
    """What the gate middleware and the drain share, one per app."""

    max_sessions: int
    #: The ephemeral keys of this process (shared through the cluster when there is one).
    secrets: ClientSecrets | None = None
    #: This process in its cluster; None for a server of one process.
    member: Member | None = None
    #: The port of this process's private listener (forwarded resumes arrive there).
    private_port: int | None = None
    draining: bool = False
    #: Session sockets open here (new, resumed and relayed).
    open_sessions: int = 0
    #: Set whenever no session socket is open.
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()

    def new_id(self, prefix: str, num_hex: int) -> str:
        """``prefix`` and ``num_hex`` hex digits; in a cluster the first four are this process's
        tag, so that any process can tell where the session or call belongs."""
        if self.member is None:
            return prefix + secrets.token_hex(num_hex // 2)
        return prefix + self.member.tag + secrets.token_hex((num_hex - len(self.member.tag)) // 2)

    def join(self, member: Member, private_port: int) -> None:
        """This process is ``member`` of a cluster, its relayed resumes arriving at ``private_port``;
        the keys it mints are published for the other processes."""
        self.member, self.private_port = member, private_port
        if self.secrets is not None:
            self.secrets.on_mint = lambda key, secret: member.publish_secret(
                key, secret.expires_at, secret.session
            )

    async def adopt_key(self, scope: Scope) -> None:
        """An ephemeral key another process minted: learnt before the key is checked."""
        secrets, member = self.secrets, self.member
        if member is None or secrets is None:  # one process: nothing to learn
            return
        key = presented_key(scope)
        if key is None or not key.startswith(PREFIX):
            return
        if secrets.lookup(key) is None and (found := await member.secret(key)) is not None:
            secrets.adopt(key, ClientSecret(*found))


class GateMiddleware:
    def __init__(self, app: ASGIApp, gate: Gate) -> None:
        self.app = app
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            await self.gate.adopt_key(scope)
            if self.gate.member is not None:  # what a relay of this request marks it with
                scope[RELAY_KEY] = self.gate.member.relay_key
        if scope["type"] == "http" and (owned := _owned_request(scope)) is not None:
            await self._to_call_owner(scope, receive, send, owned)
            return
        kind = KINDS.get(scope.get("path", "")) if scope["type"] == "websocket" else None
        if kind is None:
            await self.app(scope, receive, send)
            return
        gate, member = self.gate, self.gate.member
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        session_id = (query.get("session_id") or [None])[0]
        if kind == "voice" and "call_id" in query:
            await self._to_call_owner(scope, receive, send, query["call_id"][0])
            return
        held = [False]  # whether this socket holds one of the server-wide count
        is_duplex = _is_duplex_voice(kind, session_id, query)
        # The mark counts only where a session is named: in the URL, or a duplex first message.
        is_relayed = (session_id is not None or is_duplex) and _is_relayed(scope, gate)
        if is_duplex:
            # A duplex socket opens or resumes with its first message: drained and counted then.
            receive = self._admit_duplex(receive, send, held, is_relayed)
        elif session_id is None and gate.draining:
            await _refuse_draining(scope, receive, send)
            return
        if member is not None:
            if session_id is not None and not is_relayed and not member.owns(session_id):
                await self._relay(scope, receive, send, session_id)
                return
            if not is_duplex:
                # A resume is counted again, never refused for room.
                limit = None if session_id is not None else gate.max_sessions
                if not await member.acquire(kind, limit):
                    await _refuse_full(scope, receive, send, kind, gate.max_sessions)
                    return
                held[0] = True
        try:
            await self._count(self.app, scope, receive, send)
        finally:
            if held[0] and member is not None:
                member.release(kind)

    def _admit_duplex(self, receive: Receive, send: Send, held: list[bool], is_relayed: bool) -> Receive:
        """``receive``, which admits the socket when its first message comes: a
        ``session.resume`` as a resume (attached while the server drains; counted, never refused
        for room, and not here at all when it is relayed to its owner, which counts it), anything
        else as a new session, refused while the server drains (``server_draining``) or when it
        is full (``too_many_sessions``), then close 1013."""
        gate, member = self.gate, self.gate.member
        is_first = True

        async def counted_receive() -> Message:
            nonlocal is_first
            message = await receive()
            if not is_first or message["type"] != "websocket.receive":
                return message
            is_first = False
            resumed = _resumed_session(message.get("text"))
            if resumed is None and gate.draining and not is_relayed:
                await _send_event(send, _draining_error(), 1013)
                return {"type": "websocket.disconnect", "code": 1013}
            if member is None:
                return message
            if resumed is not None and resumed != "" and not member.owns(resumed):
                return message  # server/realtime/voice.py relays it to the owner
            limit = None if resumed is not None else gate.max_sessions
            if await member.acquire("voice", limit):
                held[0] = True
                return message
            await send_refusal(send, wire_errors.TOO_MANY_SESSIONS.error(limit=gate.max_sessions), 1013)
            return {"type": "websocket.disconnect", "code": 1013}

        return counted_receive

    async def _to_call_owner(self, scope: Scope, receive: Receive, send: Send, call_id: str) -> None:
        """A call's hangup or ``?call_id=`` attach, or a call offer resuming a session (``call_id``
        is then the session's id): to the process that holds the call or session (a call's media
        flows there), by the tag in its id; here when that is this process or none is known (the
        route then answers ``call_not_found`` or ``session_not_found``)."""
        gate, member = self.gate, self.gate.member
        if member is None or member.owns(call_id) or _is_relayed(scope, gate):
            await self.app(scope, receive, send)
            return
        address = await member.address_of(call_id)
        if address is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            timeout_s = OFFER_ANSWER_TIMEOUT_S if scope["path"] == CALLS else OWNER_ANSWER_TIMEOUT_S
            await forward_http(scope, receive, send, address, self.app, timeout_s)
        else:
            # A process that cannot be reached is answered here too: call_not_found.
            async def relay(scope: Scope, receive: Receive, send: Send) -> None:
                await forward(scope, receive, send, address, self.app)

            await self._count(relay, scope, receive, send)

    async def _relay(self, scope: Scope, receive: Receive, send: Send, session_id: str) -> None:
        assert self.gate.member is not None
        address = await self.gate.member.address_of(session_id)

        async def relay(scope: Scope, receive: Receive, send: Send) -> None:
            await forward(scope, receive, send, address)

        await self._count(relay, scope, receive, send)

    async def _count(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        gate = self.gate
        gate.open_sessions += 1
        gate.idle.clear()
        try:
            await app(scope, receive, send)
        finally:
            gate.open_sessions -= 1
            if gate.open_sessions == 0:
                gate.idle.set()


def _owned_request(scope: Scope) -> str | None:
    """The id whose process answers this HTTP request: a call's hangup names its call, a call
    offer with ``?session_id=`` the session it resumes; None for any other request."""
    path = scope.get("path", "")
    if (hangup := HANGUP.fullmatch(path)) is not None:
        return hangup.group(1)
    if path != CALLS or scope.get("method") != "POST":
        return None
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    session_ids: list[str] = query.get("session_id") or []
    return session_ids[0] if session_ids else None


def _first_values(query: dict[str, list[str]]) -> dict[str, str]:
    return {key: values[0] for key, values in query.items()}


def _resumed_session(text: str | None) -> str | None:
    """The session a duplex socket's first message resumes (``""`` when it names none), or None
    when that message is not a ``session.resume``."""
    if text is None or duplex.first_type(text) != "session.resume":
        return None
    try:
        return duplex.parse_resume(text).session_id
    except RemoteProtocolError:
        return ""


def _is_relayed(scope: Scope, gate: Gate) -> bool:
    """A resume another process relayed here: it arrives on the private port, marked with the
    cluster's secret (a client may connect to the private port too, and is then served as on the
    public one: a forged mark is no mark)."""
    port = (scope.get("server") or ("", 0))[1]
    member = gate.member
    if gate.private_port is None or port != gate.private_port or member is None or not member.relay_key:
        return False
    expected = member.relay_key.encode()
    marks = [value for key, value in scope.get("headers", []) if key == RELAYED_HEADER]
    return any(hmac.compare_digest(mark, expected) for mark in marks)


def may_see_private(scope: Scope, api_key: str | None) -> bool:
    """Whether a request may read where the cluster's processes listen (``/health``): one that
    presents the server's API key; on a server without one, a client on this machine (any other
    would learn the private ports of a server it holds no key to)."""
    if api_key is not None:
        key = presented_key(scope)
        return key is not None and hmac.compare_digest(key.encode(), api_key.encode())
    host = (scope.get("client") or ("", 0))[0]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_duplex_voice(kind: str, session_id: str | None, query: dict[str, list[str]]) -> bool:
    return kind == "voice" and session_id is None and duplex.wants_duplex(_first_values(query))


def _draining_error() -> dict[str, str | None]:
    message = "the server is draining for a shutdown; connect to another"
    return {"type": "server_error", "code": "server_draining", "message": message, "param": None}


async def _refuse_draining(scope: Scope, receive: Receive, send: Send) -> None:
    body = json.dumps({"error": _draining_error()}).encode()
    await send_denial(scope, receive, send, 503, body)


async def _send_event(send: Send, error: dict[str, str | None], code: int) -> None:
    """On an accepted socket: OpenAI's error event, as the engine's refusals send it, then the close."""
    event = {"type": "error", "event_id": "event_refused", "error": error}
    await send({"type": "websocket.send", "text": json.dumps(event)})
    await send({"type": "websocket.close", "code": code})


async def _refuse_full(scope: Scope, receive: Receive, send: Send, kind: str, limit: int) -> None:
    """The server-wide count is full: a voice client gets OpenAI's error event then close 1013,
    as a full process answers it; a world client a refused handshake."""
    if kind != "voice":
        body = wire_errors.TOO_MANY_WORLD_SESSIONS.http_body(limit=limit)
        await send_denial(scope, receive, send, 503, json.dumps(body).encode())
        return
    error = wire_errors.TOO_MANY_SESSIONS.error(limit=limit)
    await receive()  # websocket.connect
    await send({"type": "websocket.accept", "subprotocol": select_subprotocol(scope)})
    await send_refusal(send, error, 1013)
